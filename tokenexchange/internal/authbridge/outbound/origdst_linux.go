package outbound

import (
	"errors"
	"fmt"
	"net"
	"net/netip"
	"syscall"
	"unsafe"

	"golang.org/x/sys/unix"
)

// OriginalDestination returns where a connection redirected by proxy-init's nat rule was going:
// the kernel keeps the address before the redirect in the connection's conntrack entry
// (SO_ORIGINAL_DST for IPv4, IP6T_SO_ORIGINAL_DST for IPv6 — both 80).
func OriginalDestination(c net.Conn) (netip.AddrPort, error) {
	tc, ok := c.(*net.TCPConn)
	if !ok {
		return netip.AddrPort{}, fmt.Errorf("not a TCP connection: %T", c)
	}
	raw, err := tc.SyscallConn()
	if err != nil {
		return netip.AddrPort{}, err
	}
	local, _ := netip.ParseAddrPort(tc.LocalAddr().String())
	var dst netip.AddrPort
	var serr error
	err = raw.Control(func(fd uintptr) {
		if local.Addr().Unmap().Is4() {
			var sa unix.RawSockaddrInet4
			serr = getsockopt(fd, unix.SOL_IP, unix.SO_ORIGINAL_DST, unsafe.Pointer(&sa), unsafe.Sizeof(sa))
			port := uint16(sa.Port>>8) | uint16(sa.Port<<8) // network byte order
			dst = netip.AddrPortFrom(netip.AddrFrom4(sa.Addr), port)
			return
		}
		var sa unix.RawSockaddrInet6
		serr = getsockopt(fd, unix.SOL_IPV6, unix.SO_ORIGINAL_DST, unsafe.Pointer(&sa), unsafe.Sizeof(sa))
		port := uint16(sa.Port>>8) | uint16(sa.Port<<8)
		dst = netip.AddrPortFrom(netip.AddrFrom16(sa.Addr), port)
	})
	if err == nil {
		err = serr
	}
	if err != nil {
		if errors.Is(err, unix.ENOENT) {
			return netip.AddrPort{}, errors.New("connection was not redirected (no conntrack NAT entry)")
		}
		return netip.AddrPort{}, fmt.Errorf("SO_ORIGINAL_DST: %w", err)
	}
	return dst, nil
}

func getsockopt(fd uintptr, level, opt int, val unsafe.Pointer, size uintptr) error {
	l := uint32(size)
	_, _, errno := syscall.Syscall6(syscall.SYS_GETSOCKOPT, fd, uintptr(level), uintptr(opt), uintptr(val), uintptr(unsafe.Pointer(&l)), 0)
	if errno != 0 {
		return errno
	}
	return nil
}
