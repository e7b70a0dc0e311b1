package console_test

import (
	"io"
	"net/http"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/flowfabric/ffd/ffdtype"
	"github.com/flowfabric/ffd/internal/console"
	"github.com/flowfabric/ffd/internal/leases"
	"github.com/flowfabric/ffd/internal/testdb"
)

// The dead-letter page lists failed and expired solo executions with
// their last error, filtered; an operator reruns the ticked ones, or
// every one the filter matches, and the page says how many it reran. A
// read-only console shows no rerun form.
func TestConsoleDeadLetters(t *testing.T) {
	t.Parallel()
	f := testdb.Checked(t, 2*time.Minute)
	var ids []ffdtype.ExecutionID
	for _, c := range []struct{ lane, msg string }{{"dl-a", "card declined"}, {"dl-a", "card declined"}, {"dl-a", "card declined"}, {"dl-b", "gateway <timeout>"}} {
		x, _, err := leases.Create(f.Ctx, f.Pool, leases.Limits{}, ffdtype.CreateParams{Lane: c.lane, Kind: "charge", MaxAttempts: 1})
		if err != nil {
			t.Fatal(err)
		}
		xs, err := leases.Claim(f.Ctx, f.Pool, ffdtype.ClaimParams{Lane: c.lane, Worker: "w/1", Max: 1})
		if err != nil || len(xs) != 1 {
			t.Fatalf("claim: %v %v", xs, err)
		}
		if _, err := leases.Fail(f.Ctx, f.Pool, x.ID, xs[0].LeaseEpoch, ffdtype.FailParams{Error: c.msg}); err != nil {
			t.Fatal(err)
		}
		ids = append(ids, x.ID)
	}
	readOnly := serve(t, f, console.Auth{})
	code, body := get(t, readOnly+"/dead?lane=dl-b")
	if code != 200 || !strings.Contains(body, "gateway &lt;timeout&gt;") || strings.Contains(body, "card declined") || strings.Contains(body, `type="checkbox"`) {
		t.Fatalf("read-only /dead?lane=dl-b: %d; want dl-b's dead letter, escaped, and no rerun form:\n%s", code, body)
	}
	base, _ := serveLogged(t, f, console.Auth{User: "ops", Password: "pw"})
	s := newSession(t, base)
	basic := &http.Request{Header: http.Header{}}
	basic.SetBasicAuth("ops", "pw")
	auth := basic.Header
	req, _ := http.NewRequest(http.MethodGet, base+"/dead?lane=dl-a", nil)
	req.Header = auth.Clone()
	resp, err := s.c.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	page, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if n := strings.Count(string(page), `type="checkbox"`); n != 3 || !strings.Contains(string(page), "Rerun selected") {
		t.Fatalf("/dead?lane=dl-a as an operator: %d rows to tick, want 3 and the rerun buttons", n)
	}
	code, _ = s.post("/actions/dead/rerun", url.Values{"scope": {"selected"}, "lane": {"dl-a"}}, auth)
	if code != http.StatusBadRequest {
		t.Fatalf("rerun of none ticked: %d, want 400", code)
	}
	for _, c := range []struct {
		form  url.Values
		reran string
	}{
		{url.Values{"scope": {"selected"}, "lane": {"dl-a"}, "id": {ids[0].String()}}, "1"},
		{url.Values{"scope": {"matching"}, "lane": {"dl-a"}}, "2"},
	} {
		req, _ := http.NewRequest(http.MethodPost, base+"/actions/dead/rerun", strings.NewReader(c.form.Encode()+"&csrf="+url.QueryEscape(s.csrf)))
		req.Header = auth.Clone()
		req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
		resp, err := s.c.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		loc, _ := url.Parse(resp.Header.Get("Location"))
		if resp.StatusCode != http.StatusSeeOther || loc == nil || loc.Path != "/dead" || loc.Query().Get("reran") != c.reran || loc.Query().Get("lane") != "dl-a" {
			t.Fatalf("rerun %v: %d to %q; want a redirect to /dead?lane=dl-a with reran=%s", c.form, resp.StatusCode, resp.Header.Get("Location"), c.reran)
		}
	}
	code, body = get(t, readOnly+"/dead?lane=dl-a&reran=2")
	if code != 200 || !strings.Contains(body, "Reran 2 dead letters.") || !strings.Contains(body, "No dead letters match") {
		t.Fatalf("/dead after the reruns: %d; want the notice and no dead letters left:\n%s", code, body)
	}
	if n := f.Count(`SELECT count(*) FROM ff_execution WHERE rerun_of IS NOT NULL AND lane = 'dl-a'`); n != 3 {
		t.Fatalf("%d reruns in dl-a, want 3", n)
	}
}
