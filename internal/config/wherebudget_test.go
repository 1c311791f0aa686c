package config

import (
	"strings"
	"testing"
	"time"

	"github.com/backstophq/backstop"
)

// TestWhereBudget: limits.where_cost and limits.where_time reach the
// library from the file and from the environment, default when absent,
// and a negative one is refused naming the key.
func TestWhereBudget(t *testing.T) {
	c, err := Parse([]byte("limits:\n  where_cost: 5000\n  where_time: 2s\n"))
	if err != nil {
		t.Fatal(err)
	}
	if l := c.Library(); l.WhereCost != 5000 || l.WhereTime != 2*time.Second {
		t.Fatalf("library budget: %d %s", l.WhereCost, l.WhereTime)
	}
	if err := c.ApplyEnv([]string{"BACKSTOP_LIMITS_WHERE_COST=70", "BACKSTOP_LIMITS_WHERE_TIME=250ms"}); err != nil {
		t.Fatal(err)
	}
	if l := c.Library(); l.WhereCost != 70 || l.WhereTime != 250*time.Millisecond {
		t.Fatalf("budget from the environment: %d %s", l.WhereCost, l.WhereTime)
	}
	e := (&Config{}).Effective()
	if e.Limits.WhereCost != int(backstop.DefaultWhereCost) || e.Limits.WhereTime.D() != backstop.DefaultWhereTime {
		t.Fatalf("defaults: %+v", e.Limits)
	}
	for _, y := range []string{"limits:\n  where_cost: -1\n", "limits:\n  where_time: -1s\n"} {
		c, err := Parse([]byte(y))
		if err == nil {
			err = c.Validate()
		}
		key := strings.TrimSpace(strings.Split(strings.Split(y, "\n")[1], ":")[0])
		if err == nil || !strings.Contains(err.Error(), "limits."+key+": must not be negative") {
			t.Errorf("%q: %v", y, err)
		}
	}
}
