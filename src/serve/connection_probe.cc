#include "serve/connection_probe.h"

#include <arpa/inet.h>
#include <dirent.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/resource.h>
#include <sys/socket.h>

#include <algorithm>
#include <cerrno>
#include <cstdlib>
#include <cstring>

namespace dspark::serve {
namespace {

// An IPv4 or IPv6 address and port, comparable byte for byte.
struct Endpoint {
  int family = AF_UNSPEC;
  unsigned char addr[16] = {};
  int port = -1;

  bool operator==(const Endpoint& o) const {
    return family == o.family && port == o.port && std::memcmp(addr, o.addr, sizeof(addr)) == 0;
  }
};

bool Parse(const std::string& text, int port, Endpoint* out) {
  if (port <= 0 || port > 65535) return false;
  const std::string host = text.substr(0, text.find('%'));  // drop an IPv6 zone ("fe80::1%eth0")
  out->port = port;
  if (inet_pton(AF_INET, host.c_str(), out->addr) == 1) {
    out->family = AF_INET;
    return true;
  }
  if (inet_pton(AF_INET6, host.c_str(), out->addr) == 1) {
    out->family = AF_INET6;
    return true;
  }
  return false;
}

bool FromSockaddr(const sockaddr_storage& sa, Endpoint* out) {
  if (sa.ss_family == AF_INET) {
    const auto& in = reinterpret_cast<const sockaddr_in&>(sa);
    out->family = AF_INET;
    out->port = ntohs(in.sin_port);
    std::memcpy(out->addr, &in.sin_addr, sizeof(in.sin_addr));
    return true;
  }
  if (sa.ss_family == AF_INET6) {
    const auto& in6 = reinterpret_cast<const sockaddr_in6&>(sa);
    out->family = AF_INET6;
    out->port = ntohs(in6.sin6_port);
    std::memcpy(out->addr, &in6.sin6_addr, sizeof(in6.sin6_addr));
    return true;
  }
  return false;
}

bool Matches(int fd, const Endpoint& local, const Endpoint& remote) {
  int type = 0;
  socklen_t len = sizeof(type);
  if (getsockopt(fd, SOL_SOCKET, SO_TYPE, &type, &len) != 0 || type != SOCK_STREAM) return false;
  sockaddr_storage sa{};
  socklen_t sa_len = sizeof(sa);
  Endpoint e;
  if (getsockname(fd, reinterpret_cast<sockaddr*>(&sa), &sa_len) != 0 || !FromSockaddr(sa, &e) || !(e == local))
    return false;
  sa = {};
  sa_len = sizeof(sa);
  return getpeername(fd, reinterpret_cast<sockaddr*>(&sa), &sa_len) == 0 && FromSockaddr(sa, &e) && e == remote;
}

}  // namespace

int FindConnectionFd(const std::string& local_addr, int local_port, const std::string& remote_addr, int remote_port) {
  Endpoint local, remote;
  if (!Parse(local_addr, local_port, &local) || !Parse(remote_addr, remote_port, &remote)) return -1;
  if (DIR* dir = opendir("/proc/self/fd")) {
    const int own = dirfd(dir);
    int found = -1;
    while (const dirent* d = readdir(dir)) {
      char* end = nullptr;
      const long fd = std::strtol(d->d_name, &end, 10);
      if (end == d->d_name || *end != '\0' || fd == own) continue;
      if (Matches(static_cast<int>(fd), local, remote)) {
        found = static_cast<int>(fd);
        break;
      }
    }
    closedir(dir);
    return found;
  }
  // No /proc (a chroot or an unusual container): try every possible descriptor.
  rlimit lim{};
  const long max_fd = getrlimit(RLIMIT_NOFILE, &lim) == 0 && lim.rlim_cur != RLIM_INFINITY
                          ? static_cast<long>(std::min<rlim_t>(lim.rlim_cur, 1 << 16))
                          : 1 << 16;
  for (int fd = 0; fd < max_fd; ++fd)
    if (Matches(fd, local, remote)) return fd;
  return -1;
}

bool PeerClosed(int fd) {
  if (fd < 0) return false;
  pollfd p{fd, static_cast<short>(POLLIN | POLLRDHUP), 0};
  int n;
  do {
    n = poll(&p, 1, 0);
  } while (n < 0 && errno == EINTR);
  if (n <= 0 || (p.revents & POLLNVAL)) return false;
  if (p.revents & (POLLHUP | POLLERR | POLLRDHUP)) return true;
  if (!(p.revents & POLLIN)) return false;
  // Readable without a hang-up flag: pipelined bytes (alive), or an EOF/reset on a kernel that
  // reports it only as POLLIN. Peek to tell them apart.
  char c;
  const ssize_t r = recv(fd, &c, 1, MSG_PEEK | MSG_DONTWAIT);
  if (r == 0) return true;
  if (r > 0) return false;
  return errno == ECONNRESET || errno == ENOTCONN || errno == EPIPE || errno == ETIMEDOUT;
}

}  // namespace dspark::serve
