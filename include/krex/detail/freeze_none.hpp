// SPDX-License-Identifier: Apache-2.0
#pragma once

// The null method: nothing is frozen, a region relies on the gate and the
// drain alone, and its report says so. It exists so that the façade has no
// special case: every operation of freeze_method::none succeeds at once.

#include <krex/options.hpp>

namespace krex::detail::freeze_none {

inline constexpr freeze_method method = freeze_method::none;

}  // namespace krex::detail::freeze_none
