package console_test

import (
	"os"
	"strings"
	"testing"

	"github.com/backstophq/backstop/store"
)

// The audit page's type box offers every audited action the server
// accepts (store.AuditTypes).
func TestAuditPageOffersEveryAuditType(t *testing.T) {
	t.Parallel()
	src, err := os.ReadFile("assets/audit.js")
	if err != nil {
		t.Fatal(err)
	}
	for _, typ := range store.AuditTypes {
		if !strings.Contains(string(src), "'"+typ+"'") {
			t.Errorf("assets/audit.js does not offer %q", typ)
		}
	}
}
