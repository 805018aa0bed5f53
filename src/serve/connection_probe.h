// Finds the socket of an HTTP request's connection and checks whether its client has gone.
// cpp-httplib 0.11 (Debian's) gives a handler no access to its connection: no socket, no "is the
// client still there" call (Server::process_and_close_socket is private). A non-streaming
// handler writes nothing until its generation ends, so without this it cannot notice a client
// that hung up, and the generation keeps a batch slot until max_tokens. Knows no HTTP library.
#pragma once

#include <string>

namespace dspark::serve {

// The file descriptor of this process's connected TCP socket whose local end is
// local_addr:local_port and whose peer is remote_addr:remote_port (numeric IPv4/IPv6 strings as
// httplib fills Request::local_addr/remote_addr; an IPv6 "%scope" suffix is ignored). -1 if no
// such socket exists or the addresses do not parse (e.g. a Unix-domain listener).
//
// Scans /proc/self/fd (falling back to every fd below RLIMIT_NOFILE). The 4-tuple names one live
// TCP connection, so other threads opening and closing sockets during the scan cannot produce a
// false match. The fd stays valid only while its owner keeps the connection open: in httplib, for
// as long as the request's handler runs on the connection's worker thread.
int FindConnectionFd(const std::string& local_addr, int local_port, const std::string& remote_addr, int remote_port);

// True when the peer of connected socket `fd` has closed or reset the connection (or shut down
// its sending side: an HTTP client that half-closes after its request is treated as gone). Never
// blocks and consumes no data. False while the connection is open, and for an invalid fd.
bool PeerClosed(int fd);

}  // namespace dspark::serve
