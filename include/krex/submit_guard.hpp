// SPDX-License-Identifier: Apache-2.0
#pragma once

// krex::submit_guard: the gate as a harness sees it (detail/slots/submit.hpp is the
// submitter's side of the protocol, detail/steps/gate.hpp the holder's).

#include <krex/detail/config.hpp>
#include <krex/detail/slots/submit.hpp>

namespace krex {

/// RAII submission gate (step 1): while a guard lives, the tenant may put work
/// on its device; if a sibling holds a region, the constructor parks until it
/// ends. Nested guards on one thread pass at once. Costs two atomic RMWs and a
/// load when no region is held.
///
///     { krex::submit_guard g{t}; launch(...); }
template <class Tenant>
class basic_submit_guard {
 public:
  explicit basic_submit_guard(Tenant& t) noexcept : m_member(&t.detail_member()) {
    detail::submit_enter(*m_member);
  }
  ~basic_submit_guard() { detail::submit_exit(*m_member); }
  basic_submit_guard(const basic_submit_guard&) = delete;
  basic_submit_guard& operator=(const basic_submit_guard&) = delete;

 private:
  detail::member* m_member;
};

}  // namespace krex
