package egress

import (
	"slices"
	"strings"
	"testing"
)

func TestNameservers(t *testing.T) {
	conf := "# Docker\nsearch example.com\nnameserver 127.0.0.11\nnameserver ::1\nnameserver ::ffff:192.0.2.1\nnameserver 0.0.0.0\nnameserver bogus\nnameserver 2001:db8::53\noptions ndots:0\n"
	got, err := Nameservers(strings.NewReader(conf))
	if want := []string{"192.0.2.1:53", "[2001:db8::53]:53"}; err != nil || !slices.Equal(got, want) {
		t.Errorf("Nameservers = %v, %v; want %v (loopback skipped)", got, err, want)
	}
	if _, err := Nameservers(strings.NewReader("nameserver 127.0.0.53\n")); err == nil {
		t.Error("a file naming only loopback resolvers was accepted")
	}
}
