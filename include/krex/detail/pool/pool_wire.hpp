// SPDX-License-Identifier: Apache-2.0
#pragma once

// The worker pool's messages (krex::pool, pool.hpp): length-prefixed frames
// on a stream socket. A frame is a 4-byte length (host order: both ends are
// one machine and one build) and that many bytes of body; a body is a kind
// byte and fields, each an integer or a length-prefixed string.
//
// Two ways to move frames: blocking (the worker, one command at a time) and
// non-blocking with buffers (the pool's I/O thread, many workers at once).
// Both retry EINTR and resume partial reads and writes. Sends use
// MSG_NOSIGNAL: a peer that died is an error code, never a SIGPIPE.

#include <sys/socket.h>
#include <sys/types.h>

#include <cerrno>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <string>
#include <utility>

namespace krex::detail::pool_wire {

/// The largest frame either side accepts (a result or an argument list of
/// this size is a bug, not a payload): a corrupt length fails the peer
/// instead of allocating it.
inline constexpr std::uint32_t max_frame = 64U << 20;

/// What a frame carries.
enum class kind : std::uint8_t {
  command = 1,       ///< pool -> worker: id, handler name, arguments
  ready = 2,         ///< worker -> pool: pid, tenant slot (its tenant joined)
  start_failed = 3,  ///< worker -> pool: why its tenant could not join
  result = 4,        ///< worker -> pool: id, ok, payload or error, handler ns
};

/// Builds one frame: put fields, then take() the framed bytes.
class writer {
 public:
  explicit writer(kind k) : m_buf(4, '\0') { u8(static_cast<std::uint8_t>(k)); }
  writer& u8(std::uint8_t v) {
    m_buf.push_back(static_cast<char>(v));
    return *this;
  }
  writer& u32(std::uint32_t v) { return raw(&v, sizeof v); }
  writer& u64(std::uint64_t v) { return raw(&v, sizeof v); }
  writer& str(const std::string& s) {
    u32(static_cast<std::uint32_t>(s.size()));
    m_buf.append(s);
    return *this;
  }
  /// The frame, length prefix filled in. Empty if the body is over max_frame.
  std::string take() {
    const std::size_t body = m_buf.size() - 4;
    if (body > max_frame) return {};
    const auto n = static_cast<std::uint32_t>(body);
    std::memcpy(&m_buf[0], &n, sizeof n);
    return std::move(m_buf);
  }

 private:
  writer& raw(const void* p, std::size_t n) {
    m_buf.append(static_cast<const char*>(p), n);
    return *this;
  }
  std::string m_buf;
};

/// Reads the fields of one frame body in order; ok() turns false (and stays
/// false) at the first field that runs past the end.
class reader {
 public:
  explicit reader(const std::string& body) : m_p(body.data()), m_end(body.data() + body.size()) {}
  kind what() { return static_cast<kind>(u8()); }
  std::uint8_t u8() {
    std::uint8_t v = 0;
    raw(&v, sizeof v);
    return v;
  }
  std::uint32_t u32() {
    std::uint32_t v = 0;
    raw(&v, sizeof v);
    return v;
  }
  std::uint64_t u64() {
    std::uint64_t v = 0;
    raw(&v, sizeof v);
    return v;
  }
  std::string str() {
    const std::uint32_t n = u32();
    if (!m_ok || static_cast<std::size_t>(m_end - m_p) < n) {
      m_ok = false;
      return {};
    }
    std::string s(m_p, n);
    m_p += n;
    return s;
  }
  bool ok() const noexcept { return m_ok; }

 private:
  void raw(void* out, std::size_t n) {
    if (!m_ok || static_cast<std::size_t>(m_end - m_p) < n) {
      m_ok = false;
      return;
    }
    std::memcpy(out, m_p, n);
    m_p += n;
  }
  const char* m_p;
  const char* m_end;
  bool m_ok = true;
};

/// Blocking: sends all of `data`. 0, or the errno that stopped it.
inline int send_all(int fd, const std::string& data) noexcept {
  std::size_t off = 0;
  while (off < data.size()) {
    const ssize_t n = ::send(fd, data.data() + off, data.size() - off, MSG_NOSIGNAL);
    if (n < 0) {
      if (errno == EINTR) continue;
      return errno;
    }
    off += static_cast<std::size_t>(n);
  }
  return 0;
}

/// Blocking: reads exactly n bytes. 1 when done, 0 on end of stream before
/// the first byte, -errno otherwise (EPIPE: the stream ended mid-frame).
inline int recv_exact(int fd, char* out, std::size_t n) noexcept {
  std::size_t off = 0;
  while (off < n) {
    const ssize_t r = ::recv(fd, out + off, n - off, 0);
    if (r < 0) {
      if (errno == EINTR) continue;
      return -errno;
    }
    if (r == 0) return off == 0 ? 0 : -EPIPE;
    off += static_cast<std::size_t>(r);
  }
  return 1;
}

/// Blocking: reads one frame's body. 1, 0 on a clean end of stream, -errno
/// (EMSGSIZE: a length over max_frame).
inline int recv_frame(int fd, std::string& body) {
  std::uint32_t n = 0;
  const int h = recv_exact(fd, reinterpret_cast<char*>(&n), sizeof n);
  if (h <= 0) return h;
  if (n > max_frame) return -EMSGSIZE;
  body.resize(n);
  const int b = recv_exact(fd, &body[0], n);
  return b == 0 ? -EPIPE : b;
}

/// Non-blocking receive side: bytes read so far, cut into frames.
class inbox {
 public:
  /// Reads what is there. False at end of stream or on an error (errno() says which; 0 = EOF).
  bool fill(int fd) {
    char buf[65536];
    for (;;) {
      const ssize_t r = ::recv(fd, buf, sizeof buf, MSG_DONTWAIT);
      if (r > 0) {
        m_buf.append(buf, static_cast<std::size_t>(r));
        continue;
      }
      if (r == 0) {
        m_errno = 0;
        return false;
      }
      if (errno == EINTR) continue;
      if (errno == EAGAIN || errno == EWOULDBLOCK) return true;
      m_errno = errno;
      return false;
    }
  }
  /// Takes the next complete frame's body. False if none is complete yet;
  /// bad() turns true for a length over max_frame.
  bool pop(std::string& body) {
    std::uint32_t n = 0;
    if (m_buf.size() - m_off < sizeof n) return false;
    std::memcpy(&n, m_buf.data() + m_off, sizeof n);
    if (n > max_frame) {
      m_bad = true;
      return false;
    }
    if (m_buf.size() - m_off - sizeof n < n) return false;
    body.assign(m_buf, m_off + sizeof n, n);
    m_off += sizeof n + n;
    if (m_off == m_buf.size()) {
      m_buf.clear();
      m_off = 0;
    }
    return true;
  }
  bool bad() const noexcept { return m_bad; }
  int error() const noexcept { return m_errno; }
  void clear() noexcept {
    m_buf.clear();
    m_off = 0;
    m_bad = false;
    m_errno = 0;
  }

 private:
  std::string m_buf;
  std::size_t m_off = 0;
  bool m_bad = false;
  int m_errno = 0;
};

/// Non-blocking send side: frames queued, sent as the socket takes them.
class outbox {
 public:
  void push(const std::string& frame) { m_buf.append(frame); }
  bool empty() const noexcept { return m_off == m_buf.size(); }
  /// Sends what the socket takes now. 0, or the errno of a failed send (EPIPE: the peer is gone).
  int flush(int fd) noexcept {
    while (m_off < m_buf.size()) {
      const ssize_t n =
          ::send(fd, m_buf.data() + m_off, m_buf.size() - m_off, MSG_NOSIGNAL | MSG_DONTWAIT);
      if (n < 0) {
        if (errno == EINTR) continue;
        if (errno == EAGAIN || errno == EWOULDBLOCK) return 0;
        return errno;
      }
      m_off += static_cast<std::size_t>(n);
    }
    m_buf.clear();
    m_off = 0;
    return 0;
  }
  void clear() noexcept {
    m_buf.clear();
    m_off = 0;
  }

 private:
  std::string m_buf;
  std::size_t m_off = 0;
};

}  // namespace krex::detail::pool_wire
