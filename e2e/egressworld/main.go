// Command egressworld is the "internet" of the egress e2e tests: run in a
// container on a network the test creates, it is an authoritative DNS
// server for the test's names (-zone name=ip,...), an HTTP server on port
// 80 answering "hello from <-tag>", the same over TLS on 443 (a
// self-signed certificate, whatever the SNI), and a TCP listener on port
// 853 (DoT) answering the same.
package main

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"flag"
	"fmt"
	"log"
	"math/big"
	"net"
	"net/http"
	"strings"
	"time"

	"github.com/miekg/dns"
)

func main() {
	zone := flag.String("zone", "", "name=ip,... answered with A records (AAAA for an IPv6 ip; a name may repeat)")
	tag := flag.String("tag", "", "what the HTTP and TCP servers say")
	flag.Parse()
	records := map[string][]net.IP{}
	for _, kv := range strings.Split(*zone, ",") {
		name, ip, ok := strings.Cut(kv, "=")
		if ok {
			name = dns.Fqdn(strings.ToLower(name))
			records[name] = append(records[name], net.ParseIP(ip))
		}
	}
	handler := dns.HandlerFunc(func(w dns.ResponseWriter, q *dns.Msg) {
		m := new(dns.Msg)
		m.SetReply(q)
		m.Authoritative = true
		if len(q.Question) == 1 {
			qq := q.Question[0]
			ips, ok := records[strings.ToLower(qq.Name)]
			if !ok {
				m.Rcode = dns.RcodeNameError
			}
			for _, ip := range ips {
				hdr := dns.RR_Header{Name: qq.Name, Rrtype: qq.Qtype, Class: dns.ClassINET, Ttl: 30}
				switch {
				case qq.Qtype == dns.TypeA && ip.To4() != nil:
					m.Answer = append(m.Answer, &dns.A{Hdr: hdr, A: ip.To4()})
				case qq.Qtype == dns.TypeAAAA && ip.To4() == nil:
					m.Answer = append(m.Answer, &dns.AAAA{Hdr: hdr, AAAA: ip})
				}
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
	handler80 := http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { fmt.Fprintln(w, hello) })
	go func() {
		srv := &http.Server{Addr: ":443", Handler: handler80, TLSConfig: &tls.Config{Certificates: []tls.Certificate{selfSigned()}}}
		log.Fatal(srv.ListenAndServeTLS("", ""))
	}()
	log.Fatal(http.ListenAndServe(":80", handler80))
}

// selfSigned makes a throwaway certificate for the TLS server.
func selfSigned() tls.Certificate {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		log.Fatal(err)
	}
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(1), NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(24 * time.Hour), DNSNames: []string{"egressworld"}}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		log.Fatal(err)
	}
	return tls.Certificate{Certificate: [][]byte{der}, PrivateKey: key}
}
