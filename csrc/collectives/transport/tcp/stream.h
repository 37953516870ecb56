// The connection data path (internal to tcp/): one peer's byte stream striped over n
// sockets through user-space send and receive rings, and the heartbeat socket beside it.
// The listener (listener.cc) and the connector (connector.cc) make one once every socket of
// the pair has passed its handshake.
#pragma once

#include <cstddef>
#include <memory>
#include <string>
#include <vector>

#include "collectives/transport/transport.h"
#include "socket.h"

namespace xccl {

class Device;

namespace tcp {

// fds: the data sockets (chunk c of the stream travels on socket c mod n, chunks of `chunk`
// bytes), then the heartbeat socket. Allocates the two rings (XCCL_SOCKET_BUFFSIZE each) and
// registers them with `device` as staging memory.
std::unique_ptr<Connection> makeStreamConnection(int rank, int peer, std::string addr,
                                                 std::vector<net::Fd> fds, size_t chunk,
                                                 Device& device);

}  // namespace tcp
}  // namespace xccl
