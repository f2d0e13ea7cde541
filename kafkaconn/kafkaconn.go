// Package kafkaconn turns pdrouter's connection flags (--brokers, TLS, SASL)
// into franz-go client options. Every command that talks to Kafka builds its
// client here, so a production cluster is configured the same way for
// serve, ingest, migrate and log.
package kafkaconn

import (
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"os"
	"strings"

	"github.com/spf13/pflag"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/sasl/plain"
	"github.com/twmb/franz-go/pkg/sasl/scram"
)

// Config is how to reach a Kafka cluster.
type Config struct {
	// Brokers are the seed brokers, host:port. Empty means the embedded dev
	// broker, for the commands that have one.
	Brokers []string

	TLS                   bool
	TLSCAFile             string
	TLSCertFile           string
	TLSKeyFile            string
	TLSServerName         string
	TLSInsecureSkipVerify bool

	// SASLMechanism is "", "plain", "scram-sha-256" or "scram-sha-512".
	SASLMechanism string
	SASLUser      string
	SASLPassword  string
}

// BindFlags registers the connection flags on fs.
func (c *Config) BindFlags(fs *pflag.FlagSet) {
	fs.StringSliceVar(&c.Brokers, "brokers", nil, "Kafka seed brokers, comma-separated host:port (empty: the embedded dev broker where that makes sense)")
	fs.BoolVar(&c.TLS, "kafka-tls", false, "connect to Kafka over TLS")
	fs.StringVar(&c.TLSCAFile, "kafka-tls-ca", "", "PEM file of CAs that sign the brokers' certificates (implies --kafka-tls; default: system roots)")
	fs.StringVar(&c.TLSCertFile, "kafka-tls-cert", "", "PEM client certificate for mutual TLS (implies --kafka-tls)")
	fs.StringVar(&c.TLSKeyFile, "kafka-tls-key", "", "PEM client key for mutual TLS")
	fs.StringVar(&c.TLSServerName, "kafka-tls-server-name", "", "server name to verify instead of the broker's host")
	fs.BoolVar(&c.TLSInsecureSkipVerify, "kafka-tls-insecure-skip-verify", false, "do not verify broker certificates (testing only)")
	fs.StringVar(&c.SASLMechanism, "kafka-sasl-mechanism", "", "SASL mechanism: plain, scram-sha-256 or scram-sha-512")
	fs.StringVar(&c.SASLUser, "kafka-sasl-user", "", "SASL user name")
	fs.StringVar(&c.SASLPassword, "kafka-sasl-password", "", "SASL password (prefer the environment variable over the flag)")
}

// Embedded reports whether no brokers were given.
func (c *Config) Embedded() bool { return len(c.Brokers) == 0 }

// Validate checks the combination of flags.
func (c *Config) Validate() error {
	for _, b := range c.Brokers {
		if b == "" || !strings.Contains(b, ":") {
			return fmt.Errorf("--brokers: %q is not host:port", b)
		}
	}
	if (c.TLSCertFile == "") != (c.TLSKeyFile == "") {
		return errors.New("--kafka-tls-cert and --kafka-tls-key go together: give both or neither")
	}
	switch strings.ToLower(c.SASLMechanism) {
	case "":
		if c.SASLUser != "" {
			return errors.New("--kafka-sasl-user is set but --kafka-sasl-mechanism is not: choose plain, scram-sha-256 or scram-sha-512")
		}
	case "plain", "scram-sha-256", "scram-sha-512":
		if c.SASLUser == "" || c.SASLPassword == "" {
			return fmt.Errorf("--kafka-sasl-mechanism %s needs --kafka-sasl-user and PDR_KAFKA_SASL_PASSWORD", c.SASLMechanism)
		}
	default:
		return fmt.Errorf("--kafka-sasl-mechanism %q: want plain, scram-sha-256 or scram-sha-512", c.SASLMechanism)
	}
	return nil
}

// Opts returns the franz-go options that connect to the cluster.
func (c *Config) Opts() ([]kgo.Opt, error) {
	if err := c.Validate(); err != nil {
		return nil, err
	}
	opts := []kgo.Opt{kgo.SeedBrokers(c.Brokers...)}
	if c.TLS || c.TLSCAFile != "" || c.TLSCertFile != "" {
		tc, err := c.tlsConfig()
		if err != nil {
			return nil, err
		}
		opts = append(opts, kgo.DialTLSConfig(tc))
	}
	switch strings.ToLower(c.SASLMechanism) {
	case "plain":
		opts = append(opts, kgo.SASL(plain.Auth{User: c.SASLUser, Pass: c.SASLPassword}.AsMechanism()))
	case "scram-sha-256":
		opts = append(opts, kgo.SASL(scram.Auth{User: c.SASLUser, Pass: c.SASLPassword}.AsSha256Mechanism()))
	case "scram-sha-512":
		opts = append(opts, kgo.SASL(scram.Auth{User: c.SASLUser, Pass: c.SASLPassword}.AsSha512Mechanism()))
	}
	return opts, nil
}

func (c *Config) tlsConfig() (*tls.Config, error) {
	tc := &tls.Config{MinVersion: tls.VersionTLS12, ServerName: c.TLSServerName, InsecureSkipVerify: c.TLSInsecureSkipVerify} //nolint:gosec // opt-in flag
	if c.TLSCAFile != "" {
		pem, err := os.ReadFile(c.TLSCAFile)
		if err != nil {
			return nil, fmt.Errorf("--kafka-tls-ca: %w", err)
		}
		pool := x509.NewCertPool()
		if !pool.AppendCertsFromPEM(pem) {
			return nil, fmt.Errorf("--kafka-tls-ca %s: no PEM certificate found", c.TLSCAFile)
		}
		tc.RootCAs = pool
	}
	if c.TLSCertFile != "" {
		cert, err := tls.LoadX509KeyPair(c.TLSCertFile, c.TLSKeyFile)
		if err != nil {
			return nil, fmt.Errorf("--kafka-tls-cert/--kafka-tls-key: %w", err)
		}
		tc.Certificates = []tls.Certificate{cert}
	}
	return tc, nil
}
