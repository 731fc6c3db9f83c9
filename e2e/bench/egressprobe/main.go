// Command egressprobe runs inside a sandbox for the benchmark's egress
// figures: it times n TCP connects to -connect and n DNS lookups of -name
// at -dns (each on a new socket, as a program's first lookup is), and
// prints the samples in microseconds as one line:
// "connect us us ... dns us us ...".
package main

import (
	"flag"
	"fmt"
	"net"
	"os"
	"strings"
	"time"

	"github.com/miekg/dns"
)

func main() {
	connect := flag.String("connect", "", "host:port to connect to")
	server := flag.String("dns", "", "DNS server host:port")
	name := flag.String("name", "", "name to look up (A)")
	n := flag.Int("n", 100, "samples of each")
	flag.Parse()
	var out strings.Builder
	out.WriteString("connect")
	for range *n {
		start := time.Now()
		c, err := net.DialTimeout("tcp", *connect, 5*time.Second)
		if err != nil {
			fail("connect %s: %v", *connect, err)
		}
		fmt.Fprintf(&out, " %d", time.Since(start).Microseconds())
		c.Close()
	}
	out.WriteString(" dns")
	q := new(dns.Msg)
	q.SetQuestion(dns.Fqdn(*name), dns.TypeA)
	cl := &dns.Client{Timeout: 5 * time.Second}
	for range *n {
		start := time.Now()
		resp, _, err := cl.Exchange(q, *server)
		if err != nil || resp.Rcode != dns.RcodeSuccess || len(resp.Answer) == 0 {
			fail("look up %s at %s: %v %v", *name, *server, resp, err)
		}
		fmt.Fprintf(&out, " %d", time.Since(start).Microseconds())
	}
	fmt.Println(out.String())
}

func fail(format string, args ...any) {
	fmt.Fprintf(os.Stderr, "egressprobe: "+format+"\n", args...)
	os.Exit(1)
}
