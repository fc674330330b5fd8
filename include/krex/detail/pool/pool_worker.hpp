// SPDX-License-Identifier: Apache-2.0
#pragma once

// What a krex::pool worker process does (pool.hpp): join once, run the
// start hook, then run commands from its socket until the pool closes it,
// and leave the node before the process ends. Templated on the tenant type
// so that detail/ needs no public header.

#include <krex/detail/pool/pool_wire.hpp>
#include <krex/options.hpp>

#include <unistd.h>

#include <chrono>
#include <cstdint>
#include <exception>
#include <optional>
#include <string>
#include <vector>

namespace krex::detail {

/// Runs in the worker process. `handlers` maps a name to
/// std::string(Tenant&, const std::vector<std::string>&); `on_start`, if
/// set, is void(Tenant&). Returns when the pool closed the socket (or after
/// a failed command, with `recycle_on_error`).
template <class Tenant, class Handlers, class OnStart>
void pool_worker_main(int fd, const options& tenant_opts, const OnStart& on_start,
                      const Handlers& handlers, bool recycle_on_error) noexcept {
  namespace wire = pool_wire;
  using clock = std::chrono::steady_clock;
  std::optional<Tenant> t;
  try {
    t.emplace(tenant_opts);
    if (on_start) on_start(*t);
  } catch (const std::exception& e) {
    (void)wire::send_all(fd, wire::writer(wire::kind::start_failed).str(e.what()).take());
    return;
  } catch (...) {
    (void)wire::send_all(fd, wire::writer(wire::kind::start_failed)
                                 .str("the tenant's join or on_worker_start threw a "
                                      "non-standard exception")
                                 .take());
    return;
  }
  if (wire::send_all(fd, wire::writer(wire::kind::ready)
                             .u32(static_cast<std::uint32_t>(::getpid()))
                             .u32(t->slot())
                             .take()) != 0)
    return;
  std::string body;
  std::vector<std::string> args;
  while (wire::recv_frame(fd, body) == 1) {
    wire::reader r(body);
    if (r.what() != wire::kind::command) break;
    const std::uint64_t id = r.u64();
    const std::string name = r.str();
    const std::uint32_t argc = r.u32();
    if (!r.ok() || argc > body.size()) break;
    args.assign(argc, std::string());
    for (std::string& a : args) a = r.str();
    if (!r.ok()) break;
    bool ok = false;
    std::string out;
    const clock::time_point t0 = clock::now();
    try {
      const auto h = handlers.find(name);
      if (h == handlers.end()) {
        out = "no handler \"" + name + "\" in this worker";
      } else {
        out = h->second(*t, args);
        ok = true;
      }
    } catch (const std::exception& e) {
      out = e.what();
    } catch (...) {
      out = "the handler threw a non-standard exception";
    }
    const auto ns = static_cast<std::uint64_t>(
        std::chrono::duration_cast<std::chrono::nanoseconds>(clock::now() - t0).count());
    std::string frame =
        wire::writer(wire::kind::result).u64(id).u8(ok ? 1 : 0).str(out).u64(ns).take();
    if (frame.empty())
      frame = wire::writer(wire::kind::result)
                  .u64(id)
                  .u8(0)
                  .str("the handler's result is over 64 MiB")
                  .u64(ns)
                  .take();
    if (wire::send_all(fd, frame) != 0) break;
    if (!ok && recycle_on_error) break;
  }
  t.reset();  // leave the node before the process ends
  ::close(fd);
}

}  // namespace krex::detail
