// SPDX-License-Identifier: Apache-2.0
// Every error a user can cause with options, environment values or a foreign
// segment: a clear krex::error, and nothing left behind.

#include <krex/region.hpp>

#include <gtest/gtest.h>

#include "krex_test.hpp"

#include <fcntl.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cctype>
#include <cstring>

#include <chrono>
#include <functional>
#include <algorithm>
#include <iterator>
#include <string>
#include <utility>
#include <vector>
#include <utility>

using namespace std::chrono_literals;
using krex_test::scoped_segment;

namespace {

// Runs f, expects a krex::error of step s whose message contains every needle.
void expect_error(const std::function<void()>& f, krex::step s,
                  std::initializer_list<std::string> needles) {
  try {
    f();
    ADD_FAILURE() << "no krex::error thrown";
  } catch (const krex::error& e) {
    EXPECT_EQ(e.where(), s) << e.what();
    for (const auto& n : needles)
      EXPECT_NE(std::string(e.what()).find(n), std::string::npos)
          << "'" << n << "' missing from: " << e.what();
  }
}

/// Sets an environment variable for the scope of the object.
class scoped_env {
 public:
  scoped_env(const char* name, const char* value) : m_name(name) { ::setenv(name, value, 1); }
  ~scoped_env() { ::unsetenv(m_name); }

 private:
  const char* m_name;
};

bool shm_exists(const std::string& name) {
  struct stat st {};
  return ::stat(("/dev/shm/" + name).c_str(), &st) == 0;
}

/// The host backend seeing no device, as the CUDA backend does on a machine
/// with the toolkit and no GPU (or with CUDA_VISIBLE_DEVICES="").
struct no_device_backend : krex::backend::host {
  using host::host;
  int device_count() const noexcept { return 0; }
};

}  // namespace

TEST(Errors, InvalidOptionValues) {
  using krex::options;
  const auto opt = krex::step::options;
  // One device limit, the layout's, everywhere it is named.
  static_assert(options::max_devices == static_cast<int>(krex::detail::max_devices));
  const std::string devices = "0.." + std::to_string(options::max_devices - 1);
  expect_error([] { options{}.device(-1); }, opt, {"device", devices});
  expect_error([] { options{}.device(options::max_devices); }, opt, {"device", devices});
  expect_error([] { options{}.segment(""); }, opt, {"segment"});
  expect_error([] { options{}.segment("a/b"); }, opt, {"segment", "[A-Za-z0-9._-]"});
  expect_error([] { options{}.segment(std::string(65, 'x')); }, opt, {"segment"});
  expect_error([] { options{}.gate_park(0ms); }, opt, {"gate_park", "at least 1 ms"});
  expect_error([] { options{}.drain_deadline(-5ms); }, opt, {"drain_deadline", "-5 ms"});
  expect_error([] { options{}.lock_wait(-1ms); }, opt, {"lock_wait"});
  expect_error([] { options{}.lease(0ms); }, opt, {"lease"});
  expect_error([] { options{}.freeze_deadline(0ms); }, opt, {"freeze_deadline"});
  expect_error([] { options{}.handoff_grace(101ms); }, opt, {"handoff_grace", "0..100"});
  expect_error([] { options{}.cgroup_root("relative/path"); }, opt, {"cgroup_root", "absolute"});
  expect_error([] { options{}.cgroup_root("/sys/fs/cgroup/../etc"); }, opt, {"'..'"});
  expect_error([] { options{}.reserved_cores(0); }, opt, {"reserved_cores", "1..64"});
  expect_error([] { options{}.host_devices(17); }, opt, {"host_devices"});
  // Valid values are accepted.
  EXPECT_NO_THROW(options{}.device(15).segment("a.b-c_1").lock_wait(0ms).reserved_cores(2));
}

TEST(Errors, InvalidEnvironmentValues) {
  const auto opt = krex::step::options;
  const std::pair<const char*, const char*> cases[] = {
      {"KREX_DEVICE", "x"},           {"KREX_DEVICE", "99"},
      {"KREX_DEVICE", "-1"},          {"KREX_DEVICE", "1.5"},
      {"KREX_SEGMENT", "bad name"},   {"KREX_SEGMENT_ACCESS", "world"},
      {"KREX_GATE_PARK_MS", "0"},     {"KREX_DRAIN_DEADLINE_MS", "soon"},
      {"KREX_LOCK_WAIT_MS", "-3"},    {"KREX_LEASE_MS", ""},
      {"KREX_ALLOW_CONTENDED", "maybe"}, {"KREX_FREEZE", "cgroup3"},
      {"KREX_FREEZE_SCOPE", "some"},  {"KREX_FREEZE_DEADLINE_MS", "1e3"},
      {"KREX_CGROUP_ROOT", "rel"},    {"KREX_PIN", "2"},
      {"KREX_RESERVED_CORES", "100"}, {"KREX_CONFINE", "yes please"},
      {"KREX_HOST_DEVICES", "0"},     {"KREX_HANDOFF_GRACE_MS", "101"},
      {"KREX_HANDOFF_GRACE_MS", "-1"}, {"KREX_RELEASE_ON_LEAVE", "sometimes"},
      {"KREX_GATE_CONTEXTS", "partly"},
  };
  for (const auto& [name, value] : cases) {
    SCOPED_TRACE(std::string(name) + "=" + value);
    scoped_env env(name, value);
    expect_error([] { (void)krex::options{}.with_env(); }, opt, {name, "accepted:"});
  }
  // Good values are applied over the code's settings.
  scoped_env d("KREX_DEVICE", "3");
  scoped_env f("KREX_FREEZE", "signal");
  scoped_env l("KREX_LOCK_WAIT_MS", "250");
  const krex::options o = krex::options{}.device(1).with_env();
  EXPECT_EQ(o.device(), 3);
  EXPECT_EQ(o.freeze(), krex::freeze_method::signal);
  EXPECT_EQ(o.lock_wait(), 250ms);
}

// A bad environment value or a device out of range stops the join before any
// shared state is touched: no segment created, no slot claimed.
TEST(Errors, FailedJoinLeavesNothingBehind) {
  scoped_segment seg;
  const std::string full = krex::detail::segment_name(seg.opts());
  {
    scoped_env env("KREX_DRAIN_DEADLINE_MS", "-1");
    expect_error([&] { krex::tenant t{seg.opts()}; }, krex::step::options,
                 {"KREX_DRAIN_DEADLINE_MS"});
  }
  EXPECT_FALSE(shm_exists(full));
  expect_error([&] { krex::tenant t{seg.opts().device(3)}; }, krex::step::options,
               {"device 3", "1 device", "KREX_DEVICE"});
  EXPECT_FALSE(shm_exists(full));
  // With a live segment, a failed join claims no slot.
  krex::tenant ok{seg.opts()};
  {
    scoped_env env("KREX_DEVICE", "7");
    expect_error([&] { krex::tenant t{seg.opts()}; }, krex::step::options, {"device 7"});
  }
  int owned = 0;
  for (const auto& s : krex::detail::member_of(ok).node->tenants) owned += s.owner.load() != 0;
  EXPECT_EQ(owned, 1);
}

// A backend without devices says so in words (not "use a device in 0..-1")
// and touches no shared state.
TEST(Errors, BackendWithoutDevicesSaysSo) {
  scoped_segment seg;
  try {
    krex::basic_tenant<no_device_backend> t{seg.opts()};
    ADD_FAILURE() << "joined a backend without devices";
  } catch (const krex::error& e) {
    const std::string what = e.what();
    EXPECT_EQ(e.where(), krex::step::options) << what;
    EXPECT_NE(what.find("backend sees no device"), std::string::npos) << what;
    EXPECT_EQ(what.find("0..-1"), std::string::npos) << what;
    EXPECT_NE(e.hint().find("host backend"), std::string::npos) << e.hint();
  }
  EXPECT_FALSE(shm_exists(krex::detail::segment_name(seg.opts())));
}

// A segment of another layout version under our name is refused with a clear
// message and left untouched.
TEST(Errors, ForeignLayoutIsRefused) {
  scoped_segment seg;
  const std::string path = "/dev/shm/" + krex::detail::segment_name(seg.opts());
  std::string image(krex::detail::segment_size + 4096, '\0');
  const std::uint64_t magic = krex::detail::segment_magic;
  const std::uint32_t layout = krex::detail::layout_version + 1;
  std::memcpy(&image[0], &magic, 8);
  std::memcpy(&image[8], &layout, 4);
  {
    const int fd = ::open(path.c_str(), O_RDWR | O_CREAT | O_EXCL, 0600);
    ASSERT_GE(fd, 0);
    ASSERT_EQ(::write(fd, image.data(), image.size()), static_cast<ssize_t>(image.size()));
    ::close(fd);
  }
  expect_error([&] { krex::tenant t{seg.opts()}; }, krex::step::segment,
               {"layout version " + std::to_string(layout),
                "this build of krex uses " + std::to_string(krex::detail::layout_version), path});
  struct stat st {};
  ASSERT_EQ(::stat(path.c_str(), &st), 0);
  EXPECT_EQ(static_cast<std::size_t>(st.st_size), image.size()) << "the refused segment changed";
}

TEST(Errors, SegmentNameCarriesLayoutAndDomain) {
  const std::string n = krex::detail::segment_name(krex::options{}.segment("fleet"));
  EXPECT_NE(n.find("-L" + std::to_string(krex::detail::layout_version) + "-"), std::string::npos);
  EXPECT_NE(n.find("-u" + std::to_string(::getuid()) + "-"), std::string::npos);
  const std::string g = krex::detail::segment_name(
      krex::options{}.segment("fleet").access(krex::segment_access::group));
  EXPECT_NE(g.find("-g" + std::to_string(::getgid()) + "-"), std::string::npos);
}

TEST(Errors, SegmentIsPrivateToItsDomain) {
  scoped_segment seg;
  krex::tenant t{seg.opts()};
  struct stat st {};
  ASSERT_EQ(::stat(("/dev/shm/" + t.segment_name()).c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 0777, 0600U);
}

// The KREX_* variables krex knows are derived from with_env() itself (issue
// 21): each one it lists is parsed there (a bad value is refused, naming it),
// and the variables other headers read are listed too.
TEST(Errors, KnownEnvironmentVariablesAreTheParsedOnes) {
  const std::vector<std::string>& known = krex::options::env_variables();
  for (const char* n : {"KREX_DEVICE", "KREX_FREEZE", "KREX_FREEZE_SCOPE", "KREX_LEASE_MS",
                        "KREX_GATING", "KREX_HOST_DEVICES", "KREX_SHM_DIR", "KREX_GBENCH",
                        "KREX_GBENCH_STRICT", "KREX_NVBENCH_REGIONS"})
    EXPECT_NE(std::find(known.begin(), known.end(), n), known.end()) << n;
  int parsed = 0;
  for (const std::string& n : known) {
    if (std::any_of(std::begin(krex::detail::other_env_table),
                    std::end(krex::detail::other_env_table),
                    [&n](const krex::detail::env_variable& e) { return n == e.name; }))
      continue;
    SCOPED_TRACE(n);
    scoped_env env(n.c_str(), "@bad");
    expect_error([] { (void)krex::options{}.with_env(); }, krex::step::options, {n.c_str()});
    ++parsed;
  }
  EXPECT_GE(parsed, 20);
}

// A KREX_* variable close to a known one is a misspelling, named with the
// nearest; a script's own variables (far from all) are not.
TEST(Errors, MisspelledEnvironmentVariablesAreNamed) {
  using m = krex::detail::env_misspelling;
  const char* env[] = {"KREX_FREZE=signal",     "KREX_FREEZE=none",   "KREX_CUTLASS_REPS=3",
                       "PATH=/bin",             "KREX_HOST_DEVICE=2", "KREX_GBENCH_STRCT=1",
                       "KREX_DRAIN_DEADLINE=5", "KREX_FAKE_HANG=1",   "KREX_CONFIG=x",
                       nullptr};
  const auto found = krex::detail::misspelled_env(env, krex::options::env_variables());
  const std::vector<m> want = {
      {"KREX_FREZE", "KREX_FREEZE", true},
      {"KREX_HOST_DEVICE", "KREX_HOST_DEVICES", true},
      {"KREX_GBENCH_STRCT", "KREX_GBENCH_STRICT", true},
      {"KREX_DRAIN_DEADLINE", "KREX_DRAIN_DEADLINE_MS", true},  // the setter's name
      {"KREX_CONFIG", "KREX_CONFINE", false},  // two letters off a short one: maybe a script's
  };
  ASSERT_EQ(found.size(), want.size());
  for (std::size_t i = 0; i < want.size(); ++i) {
    EXPECT_EQ(found[i].name, want[i].name);
    EXPECT_EQ(found[i].near, want[i].near) << found[i].name;
    EXPECT_EQ(found[i].sure, want[i].sure) << found[i].name;
  }
  // A loose one: with_env() warns on stderr, once per name, and ignores it.
  {
    scoped_env loose("KREX_CONFIG", "1");
    testing::internal::CaptureStderr();
    const krex::options o = krex::options{}.with_env();
    (void)krex::options{}.with_env();
    const std::string err = testing::internal::GetCapturedStderr();
    EXPECT_EQ(o.confine(), krex::options{}.confine());
    const std::string line =
        "krex: options: warning: KREX_CONFIG is not a krex variable and is ignored; did you "
        "mean KREX_CONFINE?";
    EXPECT_NE(err.find(line), std::string::npos) << err;
    EXPECT_EQ(err.find(line), err.rfind(line)) << "warned twice: " << err;
  }
  // A sure one is an error naming the variable meant, with the fix.
  scoped_env typo("KREX_LEASE_MSS", "1");
  expect_error([] { (void)krex::options{}.with_env(); }, krex::step::options,
               {"KREX_LEASE_MSS is not a krex variable and would be ignored: did you mean "
                "KREX_LEASE_MS (milliseconds)?",
                "rename KREX_LEASE_MSS to KREX_LEASE_MS, or unset it"});
}

// Issue 38 (a new user's findings): the names a user builds from the C++
// setters and the Python keywords (KREX_SCOPE from options::scope,
// KREX_LEASE from options::lease, KREX_GATE_MODE from options::gate_mode)
// were ignored without a word. Each is an error naming the real variable;
// every option's setter and keyword name is caught the same way; a script's
// own variable far from all of them still passes.
TEST(Errors, VariablesNamedAfterSettersOrKeywordsAreErrors) {
  const std::pair<const char*, const char*> cases[] = {
      {"KREX_SCOPE", "KREX_FREEZE_SCOPE"},
      {"KREX_LEASE", "KREX_LEASE_MS"},
      {"KREX_GATE_MODE", "KREX_GATING"},
      {"KREX_ACCESS", "KREX_SEGMENT_ACCESS"},
      {"KREX_LOCK_WAIT", "KREX_LOCK_WAIT_MS"},
  };
  for (const auto& [name, real] : cases) {
    SCOPED_TRACE(name);
    scoped_env env(name, "1");
    expect_error([] { (void)krex::options{}.with_env(); }, krex::step::options,
                 {std::string(name) + " is not a krex variable and would be ignored: did you mean " +
                      real,
                  std::string("rename ") + name + " to " + real});
  }
  for (const krex::detail::option_spec& s : krex::detail::option_table) {
    for (const char* alias : {s.name, s.python}) {
      std::string upper = "KREX_";
      for (const char* c = alias; *c != '\0'; ++c)
        upper += static_cast<char>(std::toupper(static_cast<unsigned char>(*c)));
      if (upper == s.env) continue;
      EXPECT_EQ(krex::detail::env_of_option_name(upper), s.env) << upper;
    }
  }
  {
    scoped_env two_a("KREX_SCOPE", "all");
    scoped_env two_b("KREX_GATE_MODE", "explicit");
    expect_error([] { (void)krex::options{}.with_env(); }, krex::step::options,
                 {"KREX_SCOPE is not", "; KREX_GATE_MODE is not", "rename each"});
  }
  scoped_env own("KREX_CUTLASS_REPS", "3");
  EXPECT_NO_THROW((void)krex::options{}.with_env());
}
