// SPDX-License-Identifier: Apache-2.0
#pragma once

// The node segment: one Boost.Interprocess managed_shared_memory per node,
// layout version and security domain, holding one node_state.

#include <krex/detail/layout.hpp>
#include <krex/detail/status.hpp>
#include <krex/error.hpp>
#include <krex/options.hpp>

#include <boost/interprocess/managed_shared_memory.hpp>
#include <boost/interprocess/permissions.hpp>
#include <boost/version.hpp>

#include <sys/types.h>
#include <unistd.h>

#include <new>
#include <string>

namespace krex::detail {

/// The first object of every krex segment. Its own layout never changes, so
/// any krex build can read it and refuse a segment it does not understand.
struct segment_header {
  std::atomic<std::uint64_t> magic;
  std::atomic<std::uint32_t> layout;
  std::atomic<std::uint32_t> boost_version;
  std::atomic<std::uint64_t> node_size;
  segment_header() noexcept : magic(segment_magic), layout(layout_version),
                              boost_version(BOOST_VERSION), node_size(sizeof(node_state)) {}
};

struct node_object : node_state {
  node_object() noexcept : node_state() {
    magic.store(segment_magic);
    layout.store(layout_version);
    boost_version.store(BOOST_VERSION);
    n_devices.store(max_devices);
    n_tenants.store(max_tenants);
    size.store(sizeof(node_state));
  }
};

inline constexpr const char* header_object_name = "krex.header";
inline constexpr const char* node_object_name = "krex.node";

/// Full segment name: base, layout version, Boost version and security domain,
/// e.g. "krex-L1-B107400-u1000-krex".
inline std::string segment_name(const options& o) {
  std::string domain = o.access() == segment_access::user
                           ? "u" + std::to_string(::getuid())
                           : "g" + std::to_string(::getgid());
  return "krex-L" + std::to_string(layout_version) + "-B" + std::to_string(BOOST_VERSION) + "-" +
         domain + "-" + o.segment();
}

class segment {
 public:
  /// Creates or attaches to the node segment named by `o`. Throws
  /// krex::error(step::segment) if it cannot be opened or has another layout.
  explicit segment(const options& o) : m_name(segment_name(o)) {
    namespace bip = boost::interprocess;
    bip::permissions perm;
    perm.set_permissions(o.access() == segment_access::user ? 0600 : 0660);
    const std::size_t size = sizeof(node_object) + sizeof(segment_header) + std::size_t{64} * 1024;
    try {
      m_shm = bip::managed_shared_memory(bip::open_or_create, m_name.c_str(), size, nullptr, perm);
    } catch (const bip::interprocess_exception& e) {
      const int err = e.get_native_error();
      throw error(step::segment, "cannot open shared memory segment /dev/shm/" + m_name + " (" +
                                     e.what() + ")",
                  err > 0 ? err : 0,
                  "check that /dev/shm is writable and that the segment belongs to you "
                  "(another user's segment: set KREX_SEGMENT to another name, or use "
                  "access(segment_access::group) for a shared fleet)");
    }
    check_header(*find_or_construct<segment_header>(header_object_name));
    auto* n = find_or_construct<node_object>(node_object_name);
    if (n->magic.load() != segment_magic || n->layout.load() != layout_version ||
        n->size.load() != sizeof(node_state) || n->n_tenants.load() != max_tenants ||
        n->n_devices.load() != max_devices)
      throw error(step::segment, "segment /dev/shm/" + m_name + " holds a corrupt node state", 0,
                  remove_hint());
    // Every index and enumerated value a tenant reads from it must be in
    // range (tenants check again where they use them).
    const std::vector<std::string> problems = validate(*n);
    if (!problems.empty())
      throw error(step::segment,
                  "segment /dev/shm/" + m_name + " holds a corrupt node state (" + problems[0] +
                      (problems.size() > 1
                           ? ", and " + std::to_string(problems.size() - 1) + " more problem(s)"
                           : std::string()) +
                      ")",
                  0, remove_hint());
    m_node = n;
  }

  node_state& node() const noexcept { return *m_node; }
  const std::string& name() const noexcept { return m_name; }

  /// Removes the named segment (processes attached keep their mapping).
  static bool remove(const options& o) noexcept {
    return boost::interprocess::shared_memory_object::remove(segment_name(o).c_str());
  }

 private:
  // The named object, constructed by whichever process attaches first.
  template <class T>
  T* find_or_construct(const char* object_name) {
    try {
      return m_shm.find_or_construct<T>(object_name)();
    } catch (const std::exception& e) {
      throw error(step::segment, "segment /dev/shm/" + m_name + " is unusable (" + e.what() + ")",
                  0, remove_hint());
    }
  }

  std::string remove_hint() const {
    return "no krex build can share it; once no process uses it, remove it with "
           "`rm /dev/shm/" + m_name + "` (or choose another KREX_SEGMENT)";
  }
  void check_header(const segment_header& h) const {
    if (h.magic.load() != segment_magic)
      throw error(step::segment, "segment /dev/shm/" + m_name + " is not a krex segment", 0,
                  remove_hint());
    if (h.layout.load() != layout_version)
      throw error(step::segment,
                  "segment /dev/shm/" + m_name + " has layout version " +
                      std::to_string(h.layout.load()) + " but this build of krex uses " +
                      std::to_string(layout_version),
                  0,
                  "processes built against different krex versions cannot share a segment; "
                  "rebuild them against one version, or " + remove_hint());
    if (h.boost_version.load() != BOOST_VERSION)
      throw error(step::segment,
                  "segment /dev/shm/" + m_name + " was made with Boost " +
                      std::to_string(h.boost_version.load()) + " but this build uses " +
                      std::to_string(BOOST_VERSION),
                  0, "build every tenant against one Boost version, or " + remove_hint());
    if (h.node_size.load() != sizeof(node_state))
      throw error(step::segment,
                  "segment /dev/shm/" + m_name + " has a node state of " +
                      std::to_string(h.node_size.load()) + " bytes, this build expects " +
                      std::to_string(sizeof(node_state)),
                  0, remove_hint());
  }

  std::string m_name;
  boost::interprocess::managed_shared_memory m_shm;
  node_state* m_node = nullptr;
};

}  // namespace krex::detail
