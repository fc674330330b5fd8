// SPDX-License-Identifier: Apache-2.0
// krex::pool over several devices, with real worker processes on the host
// backend's virtual devices (options::host_devices): each worker a tenant of
// its own device, all_devices(), least-loaded routing, submit_to, per-device
// and node stats, a dead worker replaced on its own device, and the user
// errors. Slices of CPUs per device are the tenant's (test_pin covers split()
// over fake topologies of several devices and NUMA nodes).

#include "krex_test.hpp"

#include <krex/pool.hpp>

#include <gtest/gtest.h>

#include <signal.h>
#include <time.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <future>
#include <map>
#include <set>
#include <string>
#include <thread>
#include <vector>

using namespace std::chrono_literals;
using krex::pool_status;

namespace {

bool process_gone(int pid) {
  krex_test::reap_orphans();
  return ::kill(pid, 0) != 0 && errno == ESRCH;
}

class pool_devices : public ::testing::Test {
 protected:
  krex::options topts(int host_devices) const { return m_seg.opts().host_devices(host_devices); }
  krex::pool_options popts(int workers, int host_devices) const {
    return krex::pool_options{}.workers(workers).tenant(topts(host_devices)).shutdown_grace(2s);
  }
  // "device:pid": which device the worker's tenant joined, and who it is.
  static void register_handlers(krex::pool& p) {
    p.handle("where", [](krex::tenant& t, const std::vector<std::string>&) {
      return std::to_string(t.opts().device()) + ":" + std::to_string(::getpid());
    });
    p.handle("sleep", [](krex::tenant& t, const std::vector<std::string>& a) {
      std::this_thread::sleep_for(std::chrono::milliseconds(std::atoi(a.at(0).c_str())));
      return std::to_string(t.opts().device());
    });
    p.handle("die", [](krex::tenant&, const std::vector<std::string>&) -> std::string {
      ::_exit(7);
    });
    // "entered_ns:left_ns" of a region held for args[0] ms (CLOCK_MONOTONIC: one clock for all).
    p.handle("region", [](krex::tenant& t, const std::vector<std::string>& a) {
      const auto now_ns = [] {
        timespec ts{};
        ::clock_gettime(CLOCK_MONOTONIC, &ts);
        return static_cast<long long>(ts.tv_sec) * 1000000000LL + ts.tv_nsec;
      };
      krex::region r{t};
      const long long in = now_ns();
      std::this_thread::sleep_for(std::chrono::milliseconds(std::atoi(a.at(0).c_str())));
      const long long out = now_ns();
      r.exit();
      return std::to_string(in) + ":" + std::to_string(out);
    });
  }
  krex_test::scoped_segment m_seg;
};

TEST_F(pool_devices, EachWorkerIsATenantOfItsOwnDevice) {
  krex::pool p{popts(2, 3).devices({2, 0})};
  register_handlers(p);
  p.start();
  EXPECT_EQ(p.devices(), (std::vector<int>{2, 0}));
  const auto ws = p.workers();
  ASSERT_EQ(ws.size(), 4U) << "workers() is per device";
  EXPECT_EQ(ws[0].device, 2);
  EXPECT_EQ(ws[1].device, 2);
  EXPECT_EQ(ws[2].device, 0);
  EXPECT_EQ(ws[3].device, 0);
  std::map<int, int> device_of_pid;
  for (const auto& w : ws) device_of_pid[w.pid] = w.device;
  for (int d : {0, 2})
    for (int i = 0; i < 6; ++i) {
      const krex::pool_result r = p.submit_to(d, "where").get();
      ASSERT_TRUE(r.ok()) << r.error;
      EXPECT_EQ(r.device, d);
      EXPECT_EQ(r.value, std::to_string(d) + ":" + std::to_string(r.pid))
          << "the worker's tenant joined the device submit_to named";
      EXPECT_EQ(device_of_pid.at(r.pid), d);
    }
  const krex::pool_stats s = p.stats();
  EXPECT_EQ(s.submitted, 12U);
  EXPECT_EQ(s.ok, 12U);
  EXPECT_EQ(s.workers, 4);
  EXPECT_EQ(s.alive, 4);
  ASSERT_EQ(s.devices.size(), 2U);
  EXPECT_EQ(s.devices[0].device, 2);
  EXPECT_EQ(s.devices[0].commands, 6U);
  EXPECT_EQ(s.devices[1].device, 0);
  EXPECT_EQ(s.devices[1].commands, 6U);
  EXPECT_EQ(s.devices[1].workers, 2);
}

TEST_F(pool_devices, AllDevicesIsEveryDeviceTheBackendSees) {
  krex::pool p{popts(1, 3).all_devices()};
  register_handlers(p);
  p.start();
  EXPECT_EQ(p.devices(), (std::vector<int>{0, 1, 2}));
  std::set<std::string> seen;
  for (const auto& w : p.workers()) seen.insert(p.submit_to(w.device, "where").get().get());
  EXPECT_EQ(seen.size(), 3U);
  for (const auto& w : p.workers())
    EXPECT_EQ(seen.count(std::to_string(w.device) + ":" + std::to_string(w.pid)), 1U);
}

TEST_F(pool_devices, SubmitGoesToTheLeastLoadedDevice) {
  krex::pool p{popts(2, 2).devices({0, 1})};
  register_handlers(p);
  p.start();
  // Device 0 gets two long commands of its own (both its workers busy).
  auto a = p.submit_to(0, "sleep", {"1500"});
  auto b = p.submit_to(0, "sleep", {"1500"});
  ASSERT_TRUE(krex_test::wait_until([&] { return p.stats().devices[0].busy == 2; }, 5s));
  // Free commands now all go to device 1, the only one with idle workers.
  auto c = p.submit("sleep", {"300"});
  ASSERT_TRUE(krex_test::wait_until([&] { return p.stats().devices[1].busy == 1; }, 5s));
  // Device 1 is half busy, device 0 fully: the next goes to device 1 too.
  auto d = p.submit("sleep", {"300"});
  EXPECT_EQ(c.get().device, 1);
  EXPECT_EQ(d.get().device, 1);
  EXPECT_EQ(a.get().device, 0);
  EXPECT_EQ(b.get().device, 0);
  // Idle node: one command per device at a time spreads over both devices
  // (device 0 has one busy worker, so the next goes to device 1).
  auto e = p.submit_to(0, "sleep", {"800"});
  ASSERT_TRUE(krex_test::wait_until([&] { return p.stats().devices[0].busy == 1; }, 5s));
  auto f = p.submit("sleep", {"10"});
  EXPECT_EQ(f.get().device, 1) << "a device with no busy worker beats one with a busy one";
  EXPECT_EQ(e.get().device, 0);
  // A burst spreads: 4 commands over 4 idle workers on 2 devices.
  std::vector<std::future<krex::pool_result>> burst;
  for (int i = 0; i < 4; ++i) burst.push_back(p.submit("sleep", {"400"}));
  std::map<int, int> per_device;
  for (auto& x : burst) ++per_device[x.get().device];
  EXPECT_EQ(per_device[0], 2);
  EXPECT_EQ(per_device[1], 2);
}

TEST_F(pool_devices, SubmitToWaitsForItsDeviceInOrder) {
  krex::pool p{popts(1, 2).devices({0, 1})};
  register_handlers(p);
  p.start();
  auto a = p.submit_to(1, "sleep", {"300"});
  auto b = p.submit_to(1, "sleep", {"1"});  // queued behind a, though device 0 is idle
  ASSERT_TRUE(krex_test::wait_until([&] { return p.stats().devices[1].queued == 1; }, 5s));
  EXPECT_EQ(p.stats().queued, 1U);
  const krex::pool_result ra = a.get(), rb = b.get();
  EXPECT_EQ(ra.device, 1);
  EXPECT_EQ(rb.device, 1);
  EXPECT_GT(rb.queue_ms, 100) << "it waited for device 1's worker";
  EXPECT_GT(rb.id, ra.id);
}

TEST_F(pool_devices, ADeadWorkerIsReplacedOnItsDeviceAndItsCommandFails) {
  krex::pool p{popts(1, 2).devices({0, 1})};
  register_handlers(p);
  p.start();
  const auto before = p.workers();
  const int old_pid = before[1].pid;
  const krex::pool_result r = p.submit_to(1, "die").get();
  EXPECT_EQ(r.status, pool_status::crashed);
  EXPECT_EQ(r.device, 1);
  EXPECT_NE(r.error.find("exit status 7"), std::string::npos) << r.error;
  ASSERT_TRUE(krex_test::wait_until([&] { return p.stats().devices[1].alive == 1; }, 10s));
  const auto after = p.workers();
  EXPECT_EQ(after[1].device, 1);
  EXPECT_NE(after[1].pid, old_pid);
  EXPECT_EQ(after[1].respawns, 1);
  EXPECT_EQ(after[0].pid, before[0].pid) << "device 0's worker was not touched";
  EXPECT_EQ(p.submit_to(1, "where").get().get(), "1:" + std::to_string(after[1].pid))
      << "the replacement is a tenant of device 1";
  const krex::pool_stats s = p.stats();
  EXPECT_EQ(s.failures, 1U);
  EXPECT_EQ(s.respawns, 1);
  EXPECT_EQ(s.devices[1].failures, 1U);
  EXPECT_EQ(s.devices[1].respawns, 1);
  EXPECT_EQ(s.devices[0].failures, 0U);
  EXPECT_EQ(s.devices[0].respawns, 0);
  p.shutdown();
  EXPECT_TRUE(krex_test::wait_until([&] { return process_gone(old_pid); }, 5s));
}

TEST_F(pool_devices, WithoutRespawnALostDeviceCancelsOnlyItsOwnQueue) {
  krex::pool p{popts(1, 2).devices({0, 1}).respawn(false)};
  register_handlers(p);
  p.start();
  EXPECT_EQ(p.submit_to(1, "die").get().status, pool_status::crashed);
  ASSERT_TRUE(krex_test::wait_until([&] { return p.stats().devices[1].alive == 0; }, 5s));
  try {
    p.submit_to(1, "where");
    FAIL() << "submit_to a device with no worker left was accepted";
  } catch (const krex::error& e) {
    EXPECT_EQ(e.where(), krex::step::pool);
    EXPECT_NE(std::string(e.what()).find("no worker is left on device 1"), std::string::npos)
        << e.what();
  }
  EXPECT_EQ(p.submit("where").get().device, 0) << "the rest of the pool goes on";
}

// Regions are per device: workers of two devices hold theirs at once, two
// workers of one device take turns.
TEST_F(pool_devices, RegionsOverlapAcrossDevicesOnlyNotOnOneDevice) {
  krex::pool p{popts(2, 2).devices({0, 1})};
  register_handlers(p);
  p.start();
  const auto span = [](const krex::pool_result& r) {
    const std::string v = r.get();
    const std::size_t c = v.find(':');
    return std::make_pair(std::stoll(v.substr(0, c)), std::stoll(v.substr(c + 1)));
  };
  const auto overlap = [](std::pair<long long, long long> a, std::pair<long long, long long> b) {
    return a.first < b.second && b.first < a.second;
  };
  auto a = p.submit_to(0, "region", {"400"});
  auto b = p.submit_to(1, "region", {"400"});
  EXPECT_TRUE(overlap(span(a.get()), span(b.get()))) << "devices 0 and 1 held regions at once";
  auto c = p.submit_to(0, "region", {"200"});
  auto d = p.submit_to(0, "region", {"200"});
  const krex::pool_result rc = c.get(), rd = d.get();
  EXPECT_NE(rc.pid, rd.pid) << "both workers of device 0 ran one";
  EXPECT_FALSE(overlap(span(rc), span(rd))) << "one device's regions take turns";
}

TEST_F(pool_devices, UserErrorsAreClearKrexErrors) {
  const auto expect_error = [](auto fn, krex::step where, const std::string& text) {
    try {
      fn();
      FAIL() << "no error; expected one with '" << text << "'";
    } catch (const krex::error& e) {
      EXPECT_EQ(e.where(), where);
      EXPECT_NE(std::string(e.what()).find(text), std::string::npos) << e.what();
    }
  };
  expect_error([] { krex::pool_options{}.devices({}); }, krex::step::options, "at least one");
  expect_error([] { krex::pool_options{}.devices({0, 16}); }, krex::step::options, "0..15");
  expect_error([] { krex::pool_options{}.devices({1, 1}); }, krex::step::options, "twice");
  {
    krex::pool p{popts(1, 2).devices({0, 1})};
    register_handlers(p);
    p.start();
    expect_error([&] { p.submit_to(3, "where"); }, krex::step::pool, "serve device 3");
    expect_error([&] { p.submit_to(0, "nope"); }, krex::step::pool, "no handler");
  }
  {
    // A device the backend does not have: start() fails with the join error.
    krex::pool p{popts(1, 2).devices({0, 5}).start_timeout(20s)};
    register_handlers(p);
    expect_error([&] { p.start(); }, krex::step::pool, "could not start");
  }
}

TEST_F(pool_devices, OneDevicePoolIsUnchanged) {
  krex::pool p{popts(2, 1)};
  register_handlers(p);
  p.start();
  EXPECT_EQ(p.devices(), (std::vector<int>{0}));
  EXPECT_EQ(p.run("where").device, 0);
  EXPECT_EQ(p.submit_to(0, "where").get().device, 0);
  EXPECT_EQ(p.stats().devices.size(), 1U);
  EXPECT_EQ(p.stats().workers, 2);
}

}  // namespace
