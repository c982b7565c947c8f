package config

import (
	"crypto"
	"crypto/ecdsa"
	"crypto/ed25519"
	"crypto/rsa"
	"crypto/x509"
	"encoding/pem"
	"errors"
	"fmt"
	"strings"
)

// CheckPrivateKey reports why pemText is not a private key mcpvisor can
// sign client assertions with.
func CheckPrivateKey(pemText string) error {
	_, err := ParsePrivateKey(pemText)
	return err
}

// ParsePrivateKey parses the first PEM block of pemText: PKCS #8, SEC 1
// (EC) or PKCS #1 (RSA). The key is an *ecdsa.PrivateKey,
// *rsa.PrivateKey or ed25519.PrivateKey.
func ParsePrivateKey(pemText string) (crypto.Signer, error) {
	block, _ := pem.Decode([]byte(pemText))
	if block == nil {
		return nil, errors.New("no PEM block found")
	}
	var key any
	var err error
	switch block.Type {
	case "EC PRIVATE KEY":
		key, err = x509.ParseECPrivateKey(block.Bytes)
	case "RSA PRIVATE KEY":
		key, err = x509.ParsePKCS1PrivateKey(block.Bytes)
	case "PRIVATE KEY":
		key, err = x509.ParsePKCS8PrivateKey(block.Bytes)
	default:
		return nil, fmt.Errorf("PEM block %q is not a private key", block.Type)
	}
	if err != nil {
		// The parser's own text is ASN.1 detail a user cannot act on.
		return nil, fmt.Errorf("its %q PEM block does not hold a valid %s", block.Type, strings.ToLower(block.Type))
	}
	switch k := key.(type) {
	case *ecdsa.PrivateKey:
		return k, nil
	case *rsa.PrivateKey:
		return k, nil
	case ed25519.PrivateKey:
		return k, nil
	}
	return nil, fmt.Errorf("unsupported key type %T", key)
}
