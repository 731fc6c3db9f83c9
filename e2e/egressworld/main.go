// Command egressworld is the "internet" of the egress e2e tests: run in a
// container on a network the test creates, it is an authoritative DNS
// server for the test's names (-zone name=ip,...), an HTTP server on port
// 80 answering "hello from <-tag>", and a TCP listener on port 853 (DoT)
// answering the same.
package main

import (
	"flag"
	"fmt"
	"log"
	"net"
	"net/http"
	"strings"

	"github.com/miekg/dns"
)

func main() {
	zone := flag.String("zone", "", "name=ip,... answered with A records")
	tag := flag.String("tag", "", "what the HTTP and TCP servers say")
	flag.Parse()
	records := map[string]net.IP{}
	for _, kv := range strings.Split(*zone, ",") {
		name, ip, ok := strings.Cut(kv, "=")
		if ok {
			records[dns.Fqdn(strings.ToLower(name))] = net.ParseIP(ip)
		}
	}
	handler := dns.HandlerFunc(func(w dns.ResponseWriter, q *dns.Msg) {
		m := new(dns.Msg)
		m.SetReply(q)
		m.Authoritative = true
		if len(q.Question) == 1 {
			qq := q.Question[0]
			ip, ok := records[strings.ToLower(qq.Name)]
			switch {
			case !ok:
				m.Rcode = dns.RcodeNameError
			case qq.Qtype == dns.TypeA:
				m.Answer = append(m.Answer, &dns.A{Hdr: dns.RR_Header{Name: qq.Name, Rrtype: dns.TypeA, Class: dns.ClassINET, Ttl: 30}, A: ip.To4()})
			}
		}
		_ = w.WriteMsg(m)
	})
	for _, n := range []string{"udp", "tcp"} {
		go func() { log.Fatal((&dns.Server{Addr: ":53", Net: n, Handler: handler}).ListenAndServe()) }()
	}
	hello := "hello from " + *tag
	go func() {
		ln, err := net.Listen("tcp", ":853")
		if err != nil {
			log.Fatal(err)
		}
		for {
			c, err := ln.Accept()
			if err != nil {
				log.Fatal(err)
			}
			fmt.Fprintln(c, hello)
			c.Close()
		}
	}()
	log.Fatal(http.ListenAndServe(":80", http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		fmt.Fprintln(w, hello)
	})))
}
