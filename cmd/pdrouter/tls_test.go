package main

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"math/big"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/pdrouter/pdrouter/internal/kafkatest"
)

// selfSigned writes a certificate for 127.0.0.1 and its key, and returns a
// pool that trusts it.
func selfSigned(t *testing.T, dir string) (certFile, keyFile string, pool *x509.CertPool) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "pdrouter-test"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
		IPAddresses: []net.IP{net.ParseIP("127.0.0.1")}, KeyUsage: x509.KeyUsageDigitalSignature,
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	kb, _ := x509.MarshalECPrivateKey(key)
	certFile, keyFile = filepath.Join(dir, "cert.pem"), filepath.Join(dir, "key.pem")
	_ = os.WriteFile(certFile, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), 0o600)
	_ = os.WriteFile(keyFile, pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: kb}), 0o600)
	cert, _ := x509.ParseCertificate(der)
	pool = x509.NewCertPool()
	pool.AddCert(cert)
	return certFile, keyFile, pool
}

// TestServeTLSAndAuth: serve with --tls-cert/--tls-key answers over HTTPS
// only, and with PDR_AUTH_TOKEN refuses /v1 without the bearer token.
func TestServeTLSAndAuth(t *testing.T) {
	brokers := kafkatest.Fake(t)
	prefix := kafkatest.Prefix(t)
	kafkatest.Migrate(t, brokers, prefix)
	dir := t.TempDir()
	certFile, keyFile, pool := selfSigned(t, dir)
	listen, addrFile := listenArgs(t)
	cmd := exec.Command(os.Args[0], append([]string{"serve", "--brokers", strings.Join(brokers, ","), "--topic-prefix", prefix,
		"--data-dir", filepath.Join(dir, "data"), "--tls-cert", certFile, "--tls-key", keyFile}, listen...)...)
	cmd.Env = append(os.Environ(), "PDR_TEST_RUN_MAIN=1", "PDR_AUTH_TOKEN=s3cret")
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
	addr := listenAddrs(t, addrFile).HTTP
	cl := &http.Client{Timeout: 5 * time.Second, Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: pool}}}
	deadline := time.Now().Add(30 * time.Second)
	for {
		resp, err := cl.Get("https://" + addr + "/healthz")
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				break
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("no HTTPS answer: %v", err)
		}
		time.Sleep(100 * time.Millisecond)
	}
	if resp, err := http.Get("http://" + addr + "/healthz"); err == nil && resp.StatusCode == http.StatusOK {
		t.Fatal("plain HTTP answered 200 on a TLS listener")
	}
	req, _ := http.NewRequest("GET", "https://"+addr+"/v1/workers", nil)
	resp, err := cl.Do(req)
	if err != nil || resp.StatusCode != http.StatusUnauthorized {
		t.Fatalf("without token: %v %v", resp.StatusCode, err)
	}
	resp.Body.Close()
	req.Header.Set("Authorization", "Bearer s3cret")
	resp, err = cl.Do(req)
	if err != nil || resp.StatusCode != http.StatusOK {
		t.Fatalf("with token: %v %v", resp.StatusCode, err)
	}
	resp.Body.Close()
}

// TestServeBootstrapFallsBackToReplay: a peer that serves no snapshot (a
// fresh cluster has none) does not keep a replica from starting; it
// replays the log and becomes ready.
func TestServeBootstrapFallsBackToReplay(t *testing.T) {
	brokers := kafkatest.Fake(t)
	prefix := kafkatest.Prefix(t)
	kafkatest.Migrate(t, brokers, prefix)
	r := startReplica(t, brokers, prefix, t.TempDir(), "--bootstrap-from", "http://127.0.0.1:1/v1/state/snapshot")
	if !strings.Contains(r.logs.String(), "replaying the log instead") {
		t.Fatalf("no fallback in the log:\n%s", r.logs.String())
	}
}
