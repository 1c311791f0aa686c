package config

import (
	"strings"
	"testing"
)

func TestTelemetrySection(t *testing.T) {
	c, err := Parse([]byte("telemetry:\n  otlp_endpoint: http://collector:4318\n  sample_ratio: 0.25\n  metrics: false\n"))
	if err != nil {
		t.Fatal(err)
	}
	if err := c.Validate(); err != nil {
		t.Fatal(err)
	}
	tel := c.Telemetry
	if tel.OTLPEndpoint != "http://collector:4318" || tel.SampleRatio == nil || *tel.SampleRatio != 0.25 || tel.Metrics == nil || *tel.Metrics {
		t.Fatalf("telemetry %+v", tel)
	}
	if err := c.ApplyEnv([]string{"BACKSTOP_TELEMETRY_SAMPLE_RATIO=0.5", "BACKSTOP_TELEMETRY_METRICS=true"}); err != nil {
		t.Fatal(err)
	}
	if *c.Telemetry.SampleRatio != 0.5 || !*c.Telemetry.Metrics {
		t.Fatalf("env overrides: %+v", c.Telemetry)
	}
	for _, bad := range []string{"telemetry:\n  sample_ratio: 1.5\n", "telemetry:\n  sample_ratio: -0.1\n"} {
		c, err := Parse([]byte(bad))
		if err == nil {
			err = c.Validate()
		}
		if err == nil || !strings.Contains(err.Error(), "telemetry.sample_ratio") {
			t.Errorf("%q: %v, want an error naming telemetry.sample_ratio", bad, err)
		}
	}
	c = &Config{}
	if err := c.ApplyEnv([]string{"BACKSTOP_TELEMETRY_SAMPLE_RATIO=half"}); err == nil || !strings.Contains(err.Error(), "SAMPLE_RATIO") {
		t.Errorf("a ratio that is not a number: %v", err)
	}
}
