// SPDX-License-Identifier: Apache-2.0
// The library's surface and its one-home pieces: the one hash (FNV-1a), the
// one recovery config, krex::remove_segment, and that a tenant's protocol
// accessors are not public.

#include "krex_test.hpp"

#include <krex/detail/cpu/topology.hpp>
#include <krex/detail/freeze/cgroup.hpp>
#include <krex/detail/layout.hpp>
#include <krex/detail/slots/slots.hpp>
#include <krex/detail/sys.hpp>
#include <krex/region.hpp>

#include <gtest/gtest.h>

#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <string>
#include <type_traits>
#include <utility>

namespace kd = krex::detail;
using krex_test::scoped_segment;

namespace {

// has_<name><T>: true when `T` has an accessible member callable as `call`
// (an inaccessible one is a substitution failure, hence false).
#define KREX_TEST_HAS(name, call)         \
  template <class T, class = void>        \
  struct has_##name : std::false_type {}; \
  template <class T>                      \
  struct has_##name<T, std::void_t<decltype(std::declval<T&>().call)>> : std::true_type {}

KREX_TEST_HAS(detail_member, detail_member());
KREX_TEST_HAS(detail_check_guardian, detail_check_guardian());
KREX_TEST_HAS(detail_check_owner, detail_check_owner(krex::step::lock));
KREX_TEST_HAS(detail_forked, detail_forked());
KREX_TEST_HAS(detail_freezer, detail_freezer());
KREX_TEST_HAS(detail_recovery, detail_recovery());
KREX_TEST_HAS(slot, slot());

// The detector's controls: it sees a public member and not a private one.
struct exposed {
  int detail_member() { return 0; }
};
class hidden {
  int detail_member() { return 0; }

 public:
  int slot() { return detail_member(); }
};
static_assert(has_detail_member<exposed>::value);
static_assert(!has_detail_member<hidden>::value && has_slot<hidden>::value);

bool exists(const std::string& path) { return ::access(path.c_str(), F_OK) == 0; }

}  // namespace

TEST(Surface, TenantProtocolAccessorsAreNotPublic) {
  static_assert(has_slot<krex::tenant>::value, "the detector sees public members");
  static_assert(!has_detail_member<krex::tenant>::value);
  static_assert(!has_detail_check_guardian<krex::tenant>::value);
  static_assert(!has_detail_check_owner<krex::tenant>::value);
  static_assert(!has_detail_forked<krex::tenant>::value);
  static_assert(!has_detail_freezer<krex::tenant>::value);
  static_assert(!has_detail_recovery<krex::tenant>::value);
  // Tests reach the shared state through detail::member_of: the tenant's own slot.
  scoped_segment seg;
  krex::tenant t{seg.opts()};
  kd::member& m = kd::member_of(t);
  EXPECT_EQ(m.index, t.slot());
  EXPECT_EQ(m.slot->owner.load(), ::getpid());
}

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

TEST(Surface, RemoveSegmentRemovesTheNamedFileOnly) {
  scoped_segment seg;
  scoped_segment other;
  const std::string path = kd::segment_id_of(seg.opts()).path();
  const std::string other_path = kd::segment_id_of(other.opts()).path();
  {
    krex::tenant a{seg.opts()};
    krex::tenant b{other.opts()};
    ASSERT_TRUE(exists(path)) << path;
    ASSERT_TRUE(exists(other_path)) << other_path;
    EXPECT_TRUE(krex::remove_segment(seg.opts()));
    EXPECT_FALSE(exists(path));
    EXPECT_TRUE(exists(other_path)) << "another segment's file is left alone";
    // The member keeps its mapping and runs on.
    krex::region r{a};
    EXPECT_EQ(r.report().siblings_seen, 0U);
  }
  EXPECT_FALSE(krex::remove_segment(seg.opts())) << "nothing left to remove";
  EXPECT_TRUE(krex::remove_segment(other.opts()));
  EXPECT_FALSE(exists(other_path));
}

// One file reader: cgroup control files and topology files go through
// detail::read_small_file (the seam, a size bound, errno on failure).
TEST(Surface, OneSmallFileReader) {
  namespace kd = krex::detail;
  char path[] = "/tmp/krex-surface-XXXXXX";
  const int fd = ::mkstemp(path);
  ASSERT_GE(fd, 0);
  const std::string big(10000, 'x');
  ASSERT_EQ(::write(fd, big.data(), big.size()), static_cast<ssize_t>(big.size()));
  ::close(fd);
  std::string out = "stale";
  EXPECT_EQ(kd::read_small_file(path, out), 0);
  EXPECT_EQ(out, big);
  EXPECT_EQ(kd::read_small_file(path, out, 4096), 0);  // stops at the first read past the bound
  EXPECT_EQ(out.size(), 4096u);
  EXPECT_EQ(kd::cgroup::read_file(path, out), 0);
  EXPECT_EQ(out, big);
  ASSERT_TRUE(kd::read_small_file(std::string(path)).has_value());
  EXPECT_EQ(*kd::read_small_file(std::string(path)), big);
  ::unlink(path);
  EXPECT_EQ(kd::read_small_file(path, out), ENOENT);
  EXPECT_TRUE(out.empty());
  EXPECT_EQ(kd::cgroup::read_file(path, out), ENOENT);
  EXPECT_FALSE(kd::read_small_file(std::string(path)).has_value());
}
