package console

import (
	"crypto/rand"
	"crypto/subtle"
	"net/http"
	"net/url"

	"go.uber.org/zap"

	"github.com/flowfabric/ffd/internal/flows"
	"github.com/flowfabric/ffd/internal/ident"
	"github.com/flowfabric/ffd/internal/leases"
	"github.com/flowfabric/ffd/internal/store"
)

// Auth is how the console knows who acts. Without any, it is read-only:
// it shows no action and refuses every one.
type Auth struct {
	// Token, when set, lets a request act with "Authorization: Bearer
	// <token>" or, from a page, with the token typed into the action form.
	Token string
	// User and Password, when both set, let a request act with HTTP basic
	// authentication (the browser asks).
	User, Password string
}

func (a Auth) enabled() bool { return a.Token != "" || (a.User != "" && a.Password != "") }

// who authenticates r, returning who acts ("" when nobody may).
func (a Auth) who(r *http.Request) string {
	eq := func(x, y string) bool { return subtle.ConstantTimeCompare([]byte(x), []byte(y)) == 1 }
	if a.Token != "" {
		if h := r.Header.Get("Authorization"); len(h) > 7 && h[:7] == "Bearer " && eq(h[7:], a.Token) {
			return "token"
		}
		if eq(r.PostFormValue("token"), a.Token) {
			return "token"
		}
	}
	if a.User != "" && a.Password != "" {
		if u, p, ok := r.BasicAuth(); ok && eq(u, a.User) && eq(p, a.Password) {
			return u
		}
	}
	return ""
}

// newCSRF is the token every action form carries: the page that shows the
// form is the only way to learn it, and another site cannot read our
// pages, so a forged cross-site post cannot carry it.
func newCSRF() string { return rand.Text() }

// act guards an action: POST only (the mux), same origin, the CSRF token,
// then authentication; it runs do and redirects back.
func (c *Console) act(name string, do func(r *http.Request, who string) (string, error)) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		if !c.auth.enabled() {
			http.Error(w, "the console is read-only: configure a token or credentials to act", http.StatusForbidden)
			return
		}
		if o := r.Header.Get("Origin"); o != "" {
			if u, err := url.Parse(o); err != nil || u.Host != r.Host {
				http.Error(w, "cross-origin action refused", http.StatusForbidden)
				return
			}
		}
		if subtle.ConstantTimeCompare([]byte(r.PostFormValue("csrf")), []byte(c.csrf)) != 1 {
			http.Error(w, "missing or stale form token: reload the page", http.StatusForbidden)
			return
		}
		who := c.auth.who(r)
		if who == "" {
			if c.auth.User != "" {
				w.Header().Set("WWW-Authenticate", `Basic realm="ffd console"`)
			}
			http.Error(w, "authentication required", http.StatusUnauthorized)
			return
		}
		back, err := do(r, who)
		if err != nil {
			c.log.Warn("console action refused", zap.String("action", name), zap.String("who", who), zap.Error(err))
			c.fail(w, err)
			return
		}
		c.log.Info("console action", zap.String("action", name), zap.String("who", who),
			zap.String("target", r.PathValue("id")+r.PathValue("lane")), zap.String("remote", r.RemoteAddr))
		http.Redirect(w, r, back, http.StatusSeeOther)
	}
}

// routeActions registers the actions.
func (c *Console) routeActions() {
	c.mux.HandleFunc("POST /actions/executions/{id}/cancel", c.act("cancel execution", func(r *http.Request, who string) (string, error) {
		x, err := c.findExecution(r.Context(), r.PathValue("id"))
		if err != nil {
			return "", err
		}
		_, err = leases.Cancel(r.Context(), c.pool, x.ID, "cancelled from the console", who)
		return "/executions/" + x.ID.UUID.String(), err
	}))
	c.mux.HandleFunc("POST /actions/executions/{id}/rerun", c.act("rerun execution", func(r *http.Request, who string) (string, error) {
		x, err := c.findExecution(r.Context(), r.PathValue("id"))
		if err != nil {
			return "", err
		}
		again, err := leases.Rerun(r.Context(), c.pool, leases.Limits{}, x.ID)
		if err != nil {
			return "", err
		}
		return "/executions/" + again.ID.UUID.String(), nil
	}))
	c.mux.HandleFunc("POST /actions/flows/{id}/cancel", c.act("cancel flow", func(r *http.Request, who string) (string, error) {
		id, err := ident.ParseUUID("flow id", r.PathValue("id"))
		if err != nil {
			return "", err
		}
		policy := store.CancelPolicy(r.PostFormValue("policy"))
		if policy == "" {
			policy = store.CancelAll
		}
		_, err = flows.Cancel(r.Context(), c.pool, id, policy, "cancelled from the console by "+who)
		return "/flows/" + id.String(), err
	}))
	c.mux.HandleFunc("POST /actions/flows/{id}/rerun", c.act("rerun flow", func(r *http.Request, who string) (string, error) {
		id, err := ident.ParseUUID("flow id", r.PathValue("id"))
		if err != nil {
			return "", err
		}
		sub, err := flows.RerunFlow(r.Context(), c.pool, leases.Limits{}, id)
		if err != nil {
			return "", err
		}
		return "/flows/" + sub.Flow.ID.String(), nil
	}))
	for _, paused := range []bool{true, false} {
		name := map[bool]string{true: "pause", false: "resume"}[paused]
		c.mux.HandleFunc("POST /actions/lanes/{lane}/"+name, c.act(name+" lane", func(r *http.Request, who string) (string, error) {
			lane := r.PathValue("lane")
			if err := leases.ValidateName("lane", lane); err != nil {
				return "", err
			}
			_, err := store.SetLane(r.Context(), c.pool, lane, &paused, nil)
			return "/lanes", err
		}))
	}
}
