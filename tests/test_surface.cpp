// SPDX-License-Identifier: Apache-2.0
// The library's one-home pieces: the one hash (FNV-1a) and the one recovery
// config.

#include <krex/detail/hash.hpp>
#include <krex/detail/slots.hpp>

#include <gtest/gtest.h>

#include <cerrno>
#include <cstring>
#include <string>

namespace kd = krex::detail;

TEST(Surface, OneHashIsFnv1a64NeverZero) {
  // The published FNV-1a 64 test vectors.
  EXPECT_EQ(kd::fnv1a(""), 0xcbf29ce484222325ULL);
  EXPECT_EQ(kd::fnv1a("a"), 0xaf63dc4c8601ec8cULL);
  EXPECT_EQ(kd::fnv1a("foobar"), 0x85944171f73967e8ULL);
  const char bytes[] = {'f', 'o', 'o', 'b', 'a', 'r'};
  EXPECT_EQ(kd::fnv1a(bytes, sizeof bytes), kd::fnv1a("foobar"));
  // The freeze domain is the same hash of "method:root".
  EXPECT_EQ(kd::freeze_domain_hash(krex::freeze_method::cgroup_v2, "/sys/fs/cgroup/k"),
            kd::fnv1a("cgroup2:/sys/fs/cgroup/k"));
  EXPECT_NE(kd::freeze_domain_hash(krex::freeze_method::cgroup_v1, "/sys/fs/cgroup/k"),
            kd::freeze_domain_hash(krex::freeze_method::cgroup_v2, "/sys/fs/cgroup/k"));
}

TEST(Surface, RecoveryConfigHasOneMaker) {
  const kd::recovery_config c =
      kd::make_recovery_config(krex::freeze_method::cgroup_v1, "/sys/fs/cgroup/freezer/krex");
  EXPECT_EQ(c.method, krex::freeze_method::cgroup_v1);
  EXPECT_STREQ(c.root, "/sys/fs/cgroup/freezer/krex");
  EXPECT_EQ(c.domain_hash,
            kd::freeze_domain_hash(krex::freeze_method::cgroup_v1, "/sys/fs/cgroup/freezer/krex"));
  EXPECT_STREQ(c.home, "") << "the guardian's home is the tenant's to set";
  const kd::recovery_config none = kd::make_recovery_config(krex::freeze_method::none, "");
  EXPECT_EQ(none.method, krex::freeze_method::none);
  EXPECT_STREQ(none.root, "");
  EXPECT_NE(none.domain_hash, 0U);

  const std::string too_long = "/" + std::string(sizeof c.root, 'x');
  try {
    (void)kd::make_recovery_config(krex::freeze_method::cgroup_v2, too_long);
    ADD_FAILURE() << "no krex::error for a root longer than the config holds";
  } catch (const krex::error& e) {
    EXPECT_EQ(e.where(), krex::step::freeze);
    EXPECT_EQ(e.code(), ENAMETOOLONG);
    EXPECT_NE(std::string(e.what()).find("KREX_CGROUP_ROOT"), std::string::npos) << e.what();
  }
}
