// SPDX-License-Identifier: Apache-2.0
#pragma once

// The contract: a harness marks its timed loop, completely, as a region.
//
//     krex::tenant t{krex::options{}.device(0)};
//     { krex::region r{t};   // lock -> gate -> drain -> freeze -> quiet -> pin
//       ... warm-up + timed loop ...
//     }                      // unpin -> thaw -> lower gate -> release
//
// Every step taken is undone, in reverse, even when a later step throws. The
// steps and their order: krex/impl/region_core.hpp (compiled once over the
// backend; header-only unless KREX_SEPARATE_COMPILATION, see detail/core.hpp).

#include <krex/detail/config.hpp>
#include <krex/detail/core.hpp>
#include <krex/report.hpp>
#include <krex/submit_guard.hpp>
#include <krex/tenant.hpp>

#include <memory>

namespace krex {

template <class Backend>
class basic_region {
 public:
  /// Enters a region on `t`'s device: waits for the FIFO region lock, raises
  /// the gate, waits for siblings' in-flight submissions, drains them,
  /// freezes their process trees, checks that the device is quiet and pins
  /// the calling (measuring) thread to the device's reserved cores. Throws
  /// krex::error (step::lock, drain, freeze, pin) with everything it had done
  /// undone.
  explicit basic_region(basic_tenant<Backend>& t)
      : m_core(detail::enter_region(*t.m_core, t.m_ops)) {}

  /// Ends the region (noexcept); a lost lease is recorded in report().
  ~basic_region() = default;

  basic_region(const basic_region&) = delete;
  basic_region& operator=(const basic_region&) = delete;

  /// Ends the region now. Throws krex::error(step::release) if the lock had
  /// been taken away before the region ended (its lease expired, also while
  /// exiting): the body's timings were not protected to the end.
  void exit() { detail::exit_region(*m_core); }

  /// What the region did (see region_report).
  const region_report& report() const noexcept { return detail::region_report_of(*m_core); }

 private:
  std::unique_ptr<detail::region_core, detail::core_deleter> m_core;
};

/// The build's default backend (host, or CUDA / HIP when built with them).
using tenant = basic_tenant<default_backend>;
using region = basic_region<default_backend>;
using submit_guard = basic_submit_guard<tenant>;

}  // namespace krex

#if !defined(KREX_SEPARATE_COMPILATION)
#include <krex/impl/region_core.hpp>
#endif  // !defined(KREX_SEPARATE_COMPILATION)
