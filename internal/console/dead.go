package console

import (
	"net/http"
	"net/url"
	"strconv"

	"github.com/flowfabric/ffd/ffdtype"
	"github.com/flowfabric/ffd/internal/fault"
	"github.com/flowfabric/ffd/internal/leases"
)

// deadFilter reads the dead-letter filters of a query or a form.
func deadFilter(v url.Values) ffdtype.DeadLetterFilter {
	return ffdtype.DeadLetterFilter{Namespace: v.Get("namespace"), Lane: v.Get("lane"), Kind: v.Get("kind"), ErrorContains: v.Get("error")}
}

// deadQuery is a filter as the dead-letter page's query.
func deadQuery(f ffdtype.DeadLetterFilter) url.Values {
	q := url.Values{}
	for k, v := range map[string]string{"namespace": f.Namespace, "lane": f.Lane, "kind": f.Kind, "error": f.ErrorContains} {
		if v != "" {
			q.Set(k, v)
		}
	}
	return q
}

// dead lists dead letters, a page at a time, oldest first, with the
// forms that rerun the ones ticked or every one the filter matches.
func (c *Console) dead(w http.ResponseWriter, r *http.Request) {
	q := r.URL.Query()
	f := deadFilter(q)
	p := ffdtype.ListDeadParams{DeadLetterFilter: f, Limit: pageSize}
	after, err := parseAfter(q)
	if err != nil {
		c.fail(w, r, err)
		return
	}
	if after != nil {
		p.After = &ffdtype.ExecutionID{UUID: *after} // the cursor is read by uuid alone
	}
	listed, err := leases.ListDead(r.Context(), c.pool, p)
	if err != nil {
		c.fail(w, r, err)
		return
	}
	data := struct {
		page
		Dead   []*ffdtype.Execution
		Filter ffdtype.DeadLetterFilter
		Reran  int // how many the last rerun made, -1 for none
		More   bool
		Next   string
		Max    int
	}{page: c.page(w, r, "Dead letters"), Dead: listed.Executions, Filter: f, Reran: -1, More: q.Get("more") == "1", Max: leases.DefaultDeadRerun}
	if n, err := strconv.Atoi(q.Get("reran")); err == nil && n >= 0 {
		data.Reran = n
	}
	q.Del("reran")
	q.Del("more")
	if listed.Next != nil {
		q.Set("after", listed.Next.UUID.String())
		data.Next = "/dead?" + q.Encode()
	}
	c.render(w, r, "dead", data)
}

// rerunDead reruns the dead letters ticked (scope=selected) or every one
// the form's filter matches, up to leases.DefaultDeadRerun
// (scope=matching; an empty filter then means all of them, which the
// button says).
func (c *Console) rerunDead(r *http.Request, _ string) (string, error) {
	f := deadFilter(r.PostForm)
	p := ffdtype.RerunDeadParams{}
	switch r.PostFormValue("scope") {
	case "selected":
		for _, s := range r.PostForm["id"] {
			id, err := ffdtype.ParseExecutionID(s)
			if err != nil {
				return "", err
			}
			p.IDs = append(p.IDs, id)
		}
		if len(p.IDs) == 0 {
			return "", fault.Invalid(ffdtype.KindRequired, "id", "", "tick the dead letters to rerun")
		}
	case "matching":
		p.DeadLetterFilter, p.All = f, true
	default:
		return "", fault.Invalid(ffdtype.KindRequired, "scope", r.PostFormValue("scope"), "want selected or matching")
	}
	out, err := leases.RerunDead(r.Context(), c.pool, leases.Limits{}, p)
	if err != nil {
		return "", err
	}
	q := deadQuery(f)
	q.Set("reran", strconv.Itoa(len(out.Reruns)))
	if out.More {
		q.Set("more", "1")
	}
	return "/dead?" + q.Encode(), nil
}
