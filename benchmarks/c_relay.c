/* The least any relay process can do per streamed event: an epoll loop in C that copies bytes
 * between each accepted connection and its own connection to the upstream, no parsing.
 * Used by `python -m benchmarks.relay_floors` (compiled there with `cc -O2` when a C compiler
 * is present) to tell the machine's wake-up cost from any Python relay's.
 *
 *     c_relay LISTEN_PORT UPSTREAM_PORT        (both on 127.0.0.1)
 */
#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/epoll.h>
#include <sys/socket.h>
#include <unistd.h>

#define MAX_FDS 65536

static int peer[MAX_FDS]; /* the other end of each relayed socket, -1 if none */

static int tcp_socket(void) {
    int fd = socket(AF_INET, SOCK_STREAM, 0), one = 1;
    if (fd < 0) {
        perror("socket");
        exit(1);
    }
    setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
    return fd;
}

static struct sockaddr_in loopback(int port) {
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = htons((unsigned short)port)};
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    return a;
}

static void watch(int ep, int fd) {
    struct epoll_event ev = {.events = EPOLLIN, .data.fd = fd};
    epoll_ctl(ep, EPOLL_CTL_ADD, fd, &ev);
}

static void drop(int fd) {
    int other = peer[fd];
    peer[fd] = -1;
    close(fd);
    if (other >= 0) {
        peer[other] = -1;
        close(other);
    }
}

int main(int argc, char **argv) {
    if (argc != 3) {
        fprintf(stderr, "usage: c_relay LISTEN_PORT UPSTREAM_PORT\n");
        return 2;
    }
    int one = 1, lst = tcp_socket(), ep = epoll_create1(0);
    struct sockaddr_in here = loopback(atoi(argv[1])), up = loopback(atoi(argv[2]));
    setsockopt(lst, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
    if (bind(lst, (struct sockaddr *)&here, sizeof here) || listen(lst, 128)) {
        perror("listen");
        return 1;
    }
    for (int i = 0; i < MAX_FDS; i++) peer[i] = -1;
    watch(ep, lst);
    static char buf[65536];
    struct epoll_event evs[64];
    for (;;) {
        int n = epoll_wait(ep, evs, 64, -1);
        if (n < 0 && errno == EINTR) continue;
        for (int i = 0; i < n; i++) {
            int fd = evs[i].data.fd;
            if (fd == lst) {
                int down = accept(lst, NULL, NULL), upfd = tcp_socket();
                if (down < 0) continue;
                setsockopt(down, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
                if (down >= MAX_FDS || upfd >= MAX_FDS ||
                    connect(upfd, (struct sockaddr *)&up, sizeof up)) {
                    close(down);
                    close(upfd);
                    continue;
                }
                peer[down] = upfd;
                peer[upfd] = down;
                watch(ep, down);
                watch(ep, upfd);
                continue;
            }
            if (peer[fd] < 0) continue; /* closed earlier in this batch */
            ssize_t got = read(fd, buf, sizeof buf);
            if (got <= 0) {
                drop(fd);
                continue;
            }
            /* blocking write: the peers here are local readers that keep up */
            for (ssize_t off = 0; off < got;) {
                ssize_t put = write(peer[fd], buf + off, (size_t)(got - off));
                if (put <= 0) break;
                off += put;
            }
        }
    }
}
