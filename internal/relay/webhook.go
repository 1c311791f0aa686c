package relay

import (
	"bytes"
	"context"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strings"

	"github.com/backstophq/backstop"
)

// SignatureHeader carries a webhook body's HMAC-SHA256 under the sink's
// secret: "sha256=<hex>".
const SignatureHeader = "Backstop-Signature"

// webhookSink POSTs each message's payload to a URL. 2xx/3xx is delivered;
// 408, 429 and 5xx, a timeout or a network error are retried; any other
// 4xx is permanent (backstop.ClassifyHTTPStatus).
type webhookSink struct {
	url    string
	client *http.Client
	secret []byte
}

func openWebhook(u *url.URL, o Options) Sink {
	return &webhookSink{url: u.String(), client: &http.Client{Timeout: o.Timeout}, secret: []byte(o.Secret)}
}

// Sign is the signature header's value of body under secret.
func Sign(secret, body []byte) string {
	m := hmac.New(sha256.New, secret)
	m.Write(body)
	return "sha256=" + hex.EncodeToString(m.Sum(nil))
}

func (s *webhookSink) Deliver(ctx context.Context, d *Delivery) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, s.url, bytes.NewReader(d.Payload))
	if err != nil {
		return backstop.Permanent(err)
	}
	for k, v := range d.Headers {
		req.Header.Set(k, v)
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Backstop-Topic", d.Topic)
	if d.Key != "" {
		req.Header.Set("Backstop-Key", d.Key)
	}
	if len(s.secret) > 0 {
		req.Header.Set(SignatureHeader, Sign(s.secret, d.Payload))
	}
	resp, err := s.client.Do(req)
	if err != nil {
		return fmt.Errorf("webhook: %w", err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(io.LimitReader(resp.Body, 512))
	_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, 1<<20)) // let the connection be reused
	err = backstop.ClassifyHTTPStatus(resp.StatusCode)
	if err != nil {
		if b := strings.TrimSpace(string(body)); b != "" {
			err = fmt.Errorf("%w: %s", err, b)
		}
	}
	return err
}

func (s *webhookSink) Close() error {
	s.client.CloseIdleConnections()
	return nil
}
