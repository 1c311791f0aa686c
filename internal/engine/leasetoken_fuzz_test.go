package engine

import (
	"bytes"
	"strings"
	"testing"
)

// FuzzLeaseToken: whatever string a caller sends as a lease token, the
// parser neither panics nor accepts a token the key did not sign; a minted
// token verifies and names its execution; and changing any byte of it, or
// cutting or extending it, makes it fail.
func FuzzLeaseToken(f *testing.F) {
	key := bytes.Repeat([]byte{7}, leaseKeyLen)
	f.Add("01a20f36-25f6-7899-8d4f-b2b3c52e3f8a", "01a20f36-25f6-7899-8d4f-b2b3c52e3f8a", 0)
	f.Add("e", "e.AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA", 5)
	f.Add("a.b", ".", 1)
	f.Add("x", "x.1URT5zV7HtzaAN4bPdLDWszJP7dEbiEKG9AiupJF4lh", 44)
	f.Add("\xff\x00", "..............................................", -1)
	f.Add(strings.Repeat("z", 600), "", 3)
	f.Fuzz(func(t *testing.T, exec, token string, at int) {
		// Any input: no panic, and only a MAC the key made verifies.
		if got, ok := verifyLeaseToken(key, token); ok {
			if token != MintLeaseToken(key, got) {
				t.Fatalf("verified %q as execution %q, but that execution's token is %q", token, got, MintLeaseToken(key, got))
			}
		}
		if e, mac, ok := parseLeaseToken(token); ok && (len(mac) != 32 || e == "" || len(token) > maxLeaseToken) {
			t.Fatalf("parsed %q into %q and a %d-byte MAC", token, e, len(mac))
		}
		if exec == "" || len(exec) > maxLeaseToken-leaseMACText-1 {
			return
		}
		// A minted token round-trips.
		tok := MintLeaseToken(key, exec)
		got, ok := verifyLeaseToken(key, tok)
		if !ok || got != exec {
			t.Fatalf("minted token %q for %q verifies as %q, %v", tok, exec, got, ok)
		}
		if _, ok := verifyLeaseToken(bytes.Repeat([]byte{8}, leaseKeyLen), tok); ok {
			t.Fatalf("token %q verifies under another key", tok)
		}
		// Any change refuses it.
		i := at % len(tok)
		if i < 0 {
			i = -i
		}
		flipped := []byte(tok)
		flipped[i] ^= 1
		for _, bad := range []string{string(flipped), tok[:len(tok)-1], tok + "A", tok[:i] + tok[i+1:], exec} {
			if e, ok := verifyLeaseToken(key, bad); ok && bad != MintLeaseToken(key, e) {
				t.Fatalf("altered token %q (from %q) verifies as %q", bad, tok, e)
			} else if ok && e == exec {
				t.Fatalf("altered token %q verifies as the original execution %q", bad, exec)
			}
		}
	})
}

// BenchmarkLeaseToken: what a token costs the claim (mint) and each
// worker call (verify), next to the store round trip they accompany.
func BenchmarkLeaseToken(b *testing.B) {
	key := bytes.Repeat([]byte{7}, leaseKeyLen)
	const exec = "01a20f36-25f6-7899-8d4f-b2b3c52e3f8a"
	tok := MintLeaseToken(key, exec)
	b.Run("mint", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			_ = MintLeaseToken(key, exec)
		}
	})
	b.Run("verify", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			if _, ok := verifyLeaseToken(key, tok); !ok {
				b.Fatal("refused")
			}
		}
	})
}
