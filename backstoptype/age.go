package backstoptype

import (
	"errors"
	"strconv"
	"strings"
	"time"
)

// ParseAge reads an age: a Go duration with a day unit allowed in front
// ("90m", "24h", "7d", "1d12h"), never negative, at most 100,000 days.
// Filters take one as "that long ago" wherever they take a time.
func ParseAge(s string) (time.Duration, error) {
	bad := errors.New("not an age (90m, 24h, 7d, 1d12h)")
	if s == "" {
		return 0, bad
	}
	days := 0
	if i := strings.IndexByte(s, 'd'); i > 0 {
		n, err := strconv.Atoi(s[:i])
		if err != nil || n < 0 || n > 100000 {
			return 0, bad
		}
		days, s = n, s[i+1:]
	}
	var d time.Duration
	if s != "" {
		var err error
		if d, err = time.ParseDuration(s); err != nil || d < 0 {
			return 0, bad
		}
	}
	return time.Duration(days)*24*time.Hour + d, nil
}
