package kafkaconn

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestValidate(t *testing.T) {
	cases := []struct {
		c    Config
		want string
	}{
		{Config{Brokers: []string{"a:1", ""}}, `"" is not host:port`},
		{Config{TLSCertFile: "c.pem"}, "give both or neither"},
		{Config{SASLUser: "u"}, "--kafka-sasl-mechanism is not"},
		{Config{SASLMechanism: "gssapi", SASLUser: "u", SASLPassword: "p"}, `"gssapi"`},
		{Config{SASLMechanism: "scram-sha-512", SASLUser: "u"}, "PDR_KAFKA_SASL_PASSWORD"},
	}
	for _, c := range cases {
		if err := c.c.Validate(); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%+v: %v, want %q", c.c, err, c.want)
		}
	}
	for _, mech := range []string{"plain", "SCRAM-SHA-256", "scram-sha-512"} {
		c := Config{Brokers: []string{"a:1"}, SASLMechanism: mech, SASLUser: "u", SASLPassword: "p", TLS: true}
		opts, err := c.Opts()
		if err != nil || len(opts) != 3 {
			t.Errorf("%s: %d opts, %v", mech, len(opts), err)
		}
	}
}

func TestTLSFilesAreCheckedWithPreciseErrors(t *testing.T) {
	dir := t.TempDir()
	bad := filepath.Join(dir, "ca.pem")
	if err := os.WriteFile(bad, []byte("not a certificate"), 0o600); err != nil {
		t.Fatal(err)
	}
	c := Config{Brokers: []string{"a:1"}, TLSCAFile: bad}
	if _, err := c.Opts(); err == nil || !strings.Contains(err.Error(), "no PEM certificate") {
		t.Fatalf("bad CA: %v", err)
	}
	c.TLSCAFile = filepath.Join(dir, "missing.pem")
	if _, err := c.Opts(); err == nil || !strings.Contains(err.Error(), "--kafka-tls-ca") {
		t.Fatalf("missing CA: %v", err)
	}
}
