"""Two TUN devices joined by this process: every packet forwarded, one in REORDER held DELAY s so
that later ones pass it (reordering, no loss). Devices made here, moved into namespaces by ip."""
import fcntl
import heapq
import os
import random
import select
import struct
import sys
import time

TUNSETIFF, IFF_TUN, IFF_NO_PI = 0x400454CA, 0x0001, 0x1000
def tun(name):
    fd = os.open("/dev/net/tun", os.O_RDWR)
    fcntl.ioctl(fd, TUNSETIFF, struct.pack("16sH", name.encode(), IFF_TUN | IFF_NO_PI))
    return fd
a, b = tun(sys.argv[1]), tun(sys.argv[2])
REORDER, DELAY = float(sys.argv[3]), float(sys.argv[4])
peer = {a: b, b: a}
held = []  # (due, n, fd, packet)
n = 0
random.seed(7)
open(sys.argv[5], "w").write("ready\n")
while True:
    timeout = max(0.0, held[0][0] - time.monotonic()) if held else 1.0
    ready, _, _ = select.select([a, b], [], [], timeout)
    for fd in ready:
        packet = os.read(fd, 65535)
        # only TCP segments carrying data are held (byte 9 of IPv4: protocol; payload beyond headers)
        data = len(packet) > 40 + 32 and packet[0] >> 4 == 4 and packet[9] == 6
        if data and random.random() < REORDER:
            n += 1
            heapq.heappush(held, (time.monotonic() + DELAY, n, peer[fd], packet))
        else:
            os.write(peer[fd], packet)
    now = time.monotonic()
    while held and held[0][0] <= now:
        _, _, fd, packet = heapq.heappop(held)
        os.write(fd, packet)
