package config_test

import (
	"strings"
	"testing"

	"gotest.tools/v3/assert"

	"github.com/eip-project/eip/internal/config"
	"github.com/eip-project/eip/internal/config/configtest"
)

// The parser accepts every valid configuration of the table it shares with
// the admission policy's test, and refuses every invalid one saying what
// the policy says (an unknown key: warns, see configtest.Case).
func TestParseSharedTable(t *testing.T) {
	table, err := configtest.Read()
	assert.NilError(t, err)
	assert.Assert(t, len(table.Valid) > 0 && len(table.Invalid) > 0)
	for _, c := range table.Valid {
		t.Run("valid/"+c.Name, func(t *testing.T) {
			cfg, err := config.Parse(c.Data)
			assert.NilError(t, err)
			assert.Equal(t, len(cfg.Warnings), 0, "%q", cfg.Warnings)
		})
	}
	for _, c := range table.Invalid {
		t.Run("invalid/"+c.Name, func(t *testing.T) {
			cfg, err := config.Parse(c.Data)
			if c.Eipd == configtest.Warns {
				assert.NilError(t, err)
				assert.Assert(t, strings.Contains(strings.Join(cfg.Warnings, "\n"), c.Problem), "warnings %q\nwant %q", cfg.Warnings, c.Problem)
				return
			}
			assert.Assert(t, err != nil, "accepted; want %q", c.Problem)
			assert.Assert(t, strings.Contains(err.Error(), c.Problem), "got  %v\nwant %q", err, c.Problem)
		})
	}
}

// Check finds in every invalid configuration of the table a problem of a
// key the configuration sets, with the table's sentence, a line within
// ranges and bgp-peers, and a fix; in the valid ones, none.
func TestCheckSharedTable(t *testing.T) {
	table, err := configtest.Read()
	assert.NilError(t, err)
	for _, c := range table.Valid {
		problems, _ := config.Check(c.Data)
		assert.Check(t, len(problems) == 0, "%s: %+v", c.Name, problems)
	}
	for _, c := range table.Invalid {
		problems, _ := config.Check(c.Data)
		found := false
		for _, p := range problems {
			_, set := c.Data[p.Key]
			assert.Check(t, set || p.Key == "bgp-asn", "%s: problem of key %q, which is not set: %+v", c.Name, p.Key, p)
			assert.Check(t, p.Fix != "", "%s: %+v", c.Name, p)
			if strings.Contains(p.Message, " line ") && (p.Key == "ranges" || p.Key == "bgp-peers") {
				assert.Check(t, p.Line > 0, "%s: %+v", c.Name, p)
			}
			found = found || strings.Contains(p.Message, c.Problem)
		}
		assert.Check(t, found, "%s: %+v\nwant %q", c.Name, problems, c.Problem)
	}
}

func TestCheckProblem(t *testing.T) {
	problems, warnings := config.Check(map[string]string{
		"polcy":       "spread",
		"policy":      "bogus",
		"ranges":      "198.18.100.0/24\n\n198.18.101.9-198.18.101.1",
		"fence-after": "1s",
	})
	assert.DeepEqual(t, problems, []config.Problem{
		{Key: "policy", Message: `policy "bogus" is not a policy: use "sticky" or "spread"`, Fix: `use "sticky" or "spread"`},
		{Key: "ranges", Line: 3, Message: `ranges line 3 "198.18.101.9-198.18.101.1": first address 198.18.101.9 is after last address 198.18.101.1`,
			Fix: "see ranges in docs/configuration.md"},
		{Key: "polcy", Message: `unknown key "polcy": eipd ignores it`, Fix: `did you mean "policy"?`},
	})
	assert.DeepEqual(t, warnings, []string{`fence-after has no effect unless api-loss is "fence"`})
}
