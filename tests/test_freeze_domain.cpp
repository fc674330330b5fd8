// SPDX-License-Identifier: Apache-2.0
// The segment's freeze domain (detail::check_freeze_domain): every live
// tenant of a segment uses one freeze method and cgroup root. A tenant of
// another domain is refused while a tenant of the recorded one lives; a
// segment left by a run of another configuration is re-recorded, also when
// the new run's tenants join all at once (a pool's workers do).

#include "krex_test.hpp"

#include <krex/region.hpp>

#include <gtest/gtest.h>

#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <string>
#include <vector>

namespace {

using namespace std::chrono_literals;

krex::options with_freeze(const krex_test::scoped_segment& seg, krex::freeze_method m) {
  return seg.opts().freeze(m);
}

TEST(freeze_domain, a_tenant_of_another_domain_is_refused_while_one_of_the_recorded_lives) {
  krex_test::scoped_segment seg;
  krex::tenant a{with_freeze(seg, krex::freeze_method::none)};
  try {
    krex::tenant b{with_freeze(seg, krex::freeze_method::signal)};
    FAIL() << "a tenant with freeze=signal joined beside a live freeze=none one";
  } catch (const krex::error& e) {
    EXPECT_EQ(e.where(), krex::step::join);
    const std::string w = e.what();
    EXPECT_NE(w.find("(signal:-) differ from those of the tenants already on this node (none:-)"),
              std::string::npos)
        << w;
    EXPECT_NE(w.find("same KREX_FREEZE and KREX_CGROUP_ROOT"), std::string::npos) << w;
  }
  // The refused join left nothing behind: a tenant of the recorded domain still joins.
  krex::tenant c{with_freeze(seg, krex::freeze_method::none)};
  EXPECT_TRUE(c.joined());
}

TEST(freeze_domain, a_segment_left_by_another_configuration_is_re_recorded) {
  krex_test::scoped_segment seg;
  { krex::tenant a{with_freeze(seg, krex::freeze_method::none)}; }
  krex::tenant b{with_freeze(seg, krex::freeze_method::signal)};
  EXPECT_EQ(b.freeze(), krex::freeze_method::signal);
  // Now signal is the recorded domain: none is refused while b lives.
  EXPECT_THROW(krex::tenant{with_freeze(seg, krex::freeze_method::none)}, krex::error);
}

// The new run's tenants join at once: none of them may count the others,
// which are of its own domain, as tenants of the old one (the race that made
// a krex.Pool's workers fail to start after a run with another KREX_FREEZE).
TEST(freeze_domain, tenants_of_a_new_configuration_joining_at_once_all_join) {
  krex_test::scoped_segment seg;
  constexpr int children = 6;
  const krex::freeze_method methods[] = {krex::freeze_method::signal, krex::freeze_method::none};
  for (int round = 0; round < 6; ++round) {
    const krex::freeze_method old_m = methods[(round + 1) % 2];
    const krex::freeze_method new_m = methods[round % 2];
    { krex::tenant left{with_freeze(seg, old_m)}; }  // records the old domain, then leaves
    int go[2];
    ASSERT_EQ(::pipe(go), 0);
    std::vector<pid_t> pids;
    for (int c = 0; c < children; ++c)
      pids.push_back(krex_test::fork_child([&] {
        ::close(go[1]);
        char b;
        if (::read(go[0], &b, 1) != 0) return 2;  // released all at once by the close below
        krex::tenant t{with_freeze(seg, new_m)};
        ::usleep(50'000);  // stay joined while the others join
        return t.joined() ? 0 : 3;
      }));
    ::close(go[0]);
    ::close(go[1]);  // EOF: every child joins now
    int failed = 0;
    for (pid_t p : pids) failed += krex_test::exit_code(krex_test::wait_exit(p, 30s)) != 0;
    EXPECT_EQ(failed, 0) << "round " << round << ": " << failed << " of " << children
                         << " tenants of the new configuration failed to join (their error is "
                            "on stderr)";
  }
}

}  // namespace
