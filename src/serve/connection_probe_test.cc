// FindConnectionFd and PeerClosed on real loopback TCP connections inside this process.
#include "serve/connection_probe.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <gtest/gtest.h>

#include <string>

namespace dspark::serve {
namespace {

int PortOf(int fd, bool peer) {
  sockaddr_in a{};
  socklen_t len = sizeof(a);
  const int rc = peer ? getpeername(fd, reinterpret_cast<sockaddr*>(&a), &len)
                      : getsockname(fd, reinterpret_cast<sockaddr*>(&a), &len);
  return rc == 0 ? ntohs(a.sin_port) : -1;
}

// A listener, a client connected to it and the accepted server side, all on 127.0.0.1.
class Connection : public ::testing::Test {
 protected:
  void SetUp() override {
    listener_ = socket(AF_INET, SOCK_STREAM, 0);
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    ASSERT_EQ(bind(listener_, reinterpret_cast<sockaddr*>(&a), sizeof(a)), 0);
    ASSERT_EQ(listen(listener_, 4), 0);
    a.sin_port = htons(static_cast<uint16_t>(PortOf(listener_, false)));
    client_ = socket(AF_INET, SOCK_STREAM, 0);
    ASSERT_EQ(connect(client_, reinterpret_cast<sockaddr*>(&a), sizeof(a)), 0);
    server_ = accept(listener_, nullptr, nullptr);
    ASSERT_GE(server_, 0);
    server_port_ = PortOf(server_, false);
    client_port_ = PortOf(server_, true);
  }
  void TearDown() override {
    for (int fd : {client_, server_, listener_})
      if (fd >= 0) close(fd);
  }
  // Waits (at most 2 s) until the kernel has delivered the client's close to the server side.
  bool ServerSeesHangUp() {
    for (int i = 0; i < 200; ++i) {
      if (PeerClosed(server_)) return true;
      pollfd p{server_, POLLIN, 10};
      poll(&p, 1, 10);
    }
    return false;
  }

  int listener_ = -1, client_ = -1, server_ = -1;
  int server_port_ = -1, client_port_ = -1;
};

TEST_F(Connection, FindsTheAcceptedSocketNotTheClientOrListener) {
  EXPECT_EQ(FindConnectionFd("127.0.0.1", server_port_, "127.0.0.1", client_port_), server_);
  // The client's socket is the same connection seen from the other end.
  EXPECT_EQ(FindConnectionFd("127.0.0.1", client_port_, "127.0.0.1", server_port_), client_);
}

TEST_F(Connection, UnknownOrUnparsableAddressesFindNothing) {
  EXPECT_EQ(FindConnectionFd("127.0.0.1", server_port_, "127.0.0.1", client_port_ == 1 ? 2 : 1), -1);
  EXPECT_EQ(FindConnectionFd("127.0.0.2", server_port_, "127.0.0.1", client_port_), -1);
  EXPECT_EQ(FindConnectionFd("", -1, "", -1), -1);
  EXPECT_EQ(FindConnectionFd("not-an-ip", server_port_, "127.0.0.1", client_port_), -1);
}

TEST_F(Connection, OpenConnectionIsAliveEvenWithUnreadData) {
  EXPECT_FALSE(PeerClosed(server_));
  ASSERT_EQ(send(client_, "GET", 3, MSG_NOSIGNAL), 3);
  pollfd p{server_, POLLIN, 0};
  ASSERT_EQ(poll(&p, 1, 2000), 1);
  EXPECT_FALSE(PeerClosed(server_));
  // The probe peeks: the bytes are still there to read.
  char buf[8];
  EXPECT_EQ(recv(server_, buf, sizeof(buf), MSG_DONTWAIT), 3);
}

TEST_F(Connection, OrderlyCloseIsClosed) {
  close(client_);
  client_ = -1;
  EXPECT_TRUE(ServerSeesHangUp());
}

TEST_F(Connection, CloseWithUnreadRequestBytesIsClosed) {
  // A pipelined byte the server has not read must not hide the hang-up.
  ASSERT_EQ(send(client_, "x", 1, MSG_NOSIGNAL), 1);
  close(client_);
  client_ = -1;
  EXPECT_TRUE(ServerSeesHangUp());
}

TEST_F(Connection, ResetIsClosed) {
  linger l{1, 0};  // close() sends RST
  ASSERT_EQ(setsockopt(client_, SOL_SOCKET, SO_LINGER, &l, sizeof(l)), 0);
  close(client_);
  client_ = -1;
  EXPECT_TRUE(ServerSeesHangUp());
}

TEST(PeerClosed, InvalidDescriptorIsNotReportedClosed) {
  EXPECT_FALSE(PeerClosed(-1));
  int fds[2];
  ASSERT_EQ(pipe(fds), 0);
  close(fds[0]);
  close(fds[1]);
  EXPECT_FALSE(PeerClosed(fds[0]));  // closed fd: POLLNVAL
}

}  // namespace
}  // namespace dspark::serve
