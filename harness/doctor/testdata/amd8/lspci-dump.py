"""Writes lspci-xxxx.txt: the PCIe config space (`lspci -D -xxxx` shape,
its first 512 bytes: the extended capabilities end at 0x108)
of the amd8 fixture host's GPU paths, handwritten, not recorded: per
socket, one root port above a PCIe switch (one upstream port, two
downstream ports) per GPU pair, the downstream ports with ACS redirection
on (SrcValid, ReqRedir, CmpltRedir, UpstreamFwd), as Linux leaves them
with an IOMMU on. `lspci -F lspci-xxxx.txt -D -vvv` renders it as
lspci-vvv.txt (harness/doctor's TestLSPCIRendering checks that, where
lspci is installed). Run: python3 lspci-dump.py > lspci-xxxx.txt
"""

GPUS = [0x18, 0x2A, 0x3A, 0x5D, 0x9A, 0xAB, 0xBA, 0xDB]


def space(vendor, device, cls, header, exp_type, bus=None, acs=None):
    c = bytearray(4096)
    c[0:2], c[2:4] = vendor.to_bytes(2, "little"), device.to_bytes(2, "little")
    c[4:6] = (0x0006).to_bytes(2, "little")  # memory space, bus master
    c[6:8] = (0x0010).to_bytes(2, "little")  # capability list
    c[8] = 0x01  # revision
    c[9:12] = cls.to_bytes(3, "little")  # prog-if, subclass, class
    c[0x0E] = header
    if bus:
        c[0x18], c[0x19], c[0x1A] = bus
    c[0x34] = 0x40
    # PCI Express capability at 0x40, version 2, the port type given.
    c[0x40], c[0x41] = 0x10, 0x00
    c[0x42:0x44] = ((exp_type << 4) | 2 | (0x100 if exp_type in (4, 6) else 0)).to_bytes(2, "little")
    c[0x44:0x48] = (0x00008000 | 2).to_bytes(4, "little")  # DevCap: 512-byte payloads
    c[0x4C:0x50] = ((16 << 4) | 5).to_bytes(4, "little")  # LnkCap: speed 5 (32GT/s), width x16
    c[0x52:0x54] = ((16 << 4) | 5).to_bytes(2, "little")  # LnkSta
    if acs is not None:
        # ACS extended capability at 0x100, version 1, last.
        c[0x100:0x104] = (0x000D | (1 << 16)).to_bytes(4, "little")
        c[0x104:0x106] = (0x007F).to_bytes(2, "little")  # every ACS feature
        c[0x106:0x108] = acs.to_bytes(2, "little")
    return c


def dump(addr, desc, c):
    out = ["%s %s" % (addr, desc)]
    for row in range(0, 0x200, 16):  # the extended capabilities end at 0x108
        out.append("%03x: %s" % (row, " ".join("%02x" % b for b in c[row:row + 16])) if row >= 0x100 else
                   "%02x: %s" % (row, " ".join("%02x" % b for b in c[row:row + 16])))
    return "\n".join(out)


out = []
for pair in range(4):
    g0, g1 = GPUS[2 * pair], GPUS[2 * pair + 1]
    up = g0 - 2  # the switch's upstream port's bus
    root = "0000:%02x:01.0" % (0x00 if pair < 2 else 0x80)
    rp_bus = 0x00 if pair < 2 else 0x80
    out.append(dump("0000:%02x:%02x.0" % (rp_bus, 1 + pair % 2), "PCI bridge: root port",
                    space(0x1022, 0x14AB, 0x060400, 0x01, 4, bus=(rp_bus, up, g1), acs=0x0000)))
    out.append(dump("0000:%02x:00.0" % up, "PCI bridge: switch upstream port",
                    space(0x1000, 0xC040, 0x060400, 0x01, 5, bus=(up, up + 1, g1))))
    for k, g in enumerate((g0, g1)):
        out.append(dump("0000:%02x:%02x.0" % (up + 1, k), "PCI bridge: switch downstream port",
                        space(0x1000, 0xC040, 0x060400, 0x01, 6, bus=(up + 1, g, g), acs=0x001D)))
    for g in (g0, g1):
        out.append(dump("0000:%02x:00.0" % g, "3D controller: GPU", space(0x10DE, 0x2BB5, 0x030200, 0x00, 0)))
print("\n\n".join(out))
