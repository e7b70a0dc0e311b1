package console

import (
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/hex"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"strings"

	"go.uber.org/zap"

	"github.com/flowfabric/ffd/ffdtype"
	"github.com/flowfabric/ffd/internal/fault"
	"github.com/flowfabric/ffd/internal/flows"
	"github.com/flowfabric/ffd/internal/leases"
	"github.com/flowfabric/ffd/internal/store"
)

// Auth is how the console knows who acts. Without any, it is read-only:
// it shows no action and refuses every one.
type Auth struct {
	// Token, when set, lets a request act with "Authorization: Bearer
	// <token>" or, from a browser, after signing in once with the token
	// on /login (a cookie then carries the proof).
	Token string
	// User and Password, when both set, let a request act with HTTP basic
	// authentication (the browser asks).
	User, Password string
}

func (a Auth) enabled() bool { return a.Token != "" || (a.User != "" && a.Password != "") }

// Cookie names. Both are HttpOnly and SameSite=Strict, so another site's
// page can neither read them nor make the browser send them.
const (
	sessionCookie = "ffd_session" // a random id per browser; the form token is derived from it
	signInCookie  = "ffd_signin"  // proof the browser signed in with the token
)

// keys signs what the console hands out: form tokens and the sign-in
// proof. They are random per process, so a restart asks browsers to
// reload their pages and to sign in again.
type keys struct{ secret []byte }

func newKeys() keys {
	b := make([]byte, 32)
	_, _ = rand.Read(b) // crypto/rand never fails on supported systems
	return keys{secret: b}
}

func (k keys) sign(purpose, value string) string {
	m := hmac.New(sha256.New, k.secret)
	m.Write([]byte(purpose))
	m.Write([]byte{0})
	m.Write([]byte(value))
	return hex.EncodeToString(m.Sum(nil))
}

// session returns the browser's session id, minting one (and its cookie)
// when the request has none.
func (c *Console) session(w http.ResponseWriter, r *http.Request) string {
	if ck, err := r.Cookie(sessionCookie); err == nil && len(ck.Value) >= 20 && len(ck.Value) <= 64 {
		return ck.Value
	}
	id := rand.Text()
	http.SetCookie(w, &http.Cookie{Name: sessionCookie, Value: id, Path: "/", HttpOnly: true, SameSite: http.SameSiteStrictMode, Secure: r.TLS != nil})
	// The request that minted it renders its forms with it too.
	r.AddCookie(&http.Cookie{Name: sessionCookie, Value: id})
	return id
}

// csrfFor is the form token of a session: each browser gets its own, and
// only a page of ours that it loaded shows it.
func (c *Console) csrfFor(session string) string { return c.keys.sign("csrf", session) }

// signedIn says whether the browser signed in with the token.
func (c *Console) signedIn(r *http.Request) bool {
	if c.auth.Token == "" {
		return false
	}
	sess, err := r.Cookie(sessionCookie)
	if err != nil {
		return false
	}
	proof, err := r.Cookie(signInCookie)
	if err != nil {
		return false
	}
	return hmac.Equal([]byte(proof.Value), []byte(c.keys.sign("signin", sess.Value)))
}

// bearer says whether r carries the console's token in its Authorization
// header: what a script sends, and what a browser never adds on its own.
func (c *Console) bearer(r *http.Request) bool {
	h := r.Header.Get("Authorization")
	return c.auth.Token != "" && strings.HasPrefix(h, "Bearer ") && subtle.ConstantTimeCompare([]byte(h[7:]), []byte(c.auth.Token)) == 1
}

// who authenticates r, returning who acts ("" when nobody may).
func (c *Console) who(r *http.Request) string {
	a := c.auth
	eq := func(x, y string) bool { return subtle.ConstantTimeCompare([]byte(x), []byte(y)) == 1 }
	if a.Token != "" {
		if c.bearer(r) {
			return "token"
		}
		if c.signedIn(r) {
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

// sameOrigin refuses a request whose Origin is another site.
func sameOrigin(r *http.Request) bool {
	o := r.Header.Get("Origin")
	if o == "" {
		return true
	}
	u, err := url.Parse(o)
	return err == nil && u.Host == r.Host
}

// formToken checks the form token against the request's session.
func (c *Console) formToken(r *http.Request) bool {
	sess, err := r.Cookie(sessionCookie)
	if err != nil {
		return false
	}
	return hmac.Equal([]byte(r.PostFormValue("csrf")), []byte(c.csrfFor(sess.Value)))
}

// maxFormBytes bounds the body of a form the console reads: its forms
// carry a token and a choice or two.
const maxFormBytes = 64 << 10

// readForm reads r's form within maxFormBytes. A body over the bound is
// refused with 413, a body that does not parse with 400, before anything
// is done: a form read only in part (http.Request.PostFormValue hides
// the error) would look like one whose choices were left out, and an
// action must not run on choices it did not get.
func readForm(w http.ResponseWriter, r *http.Request) bool {
	r.Body = http.MaxBytesReader(w, r.Body, maxFormBytes)
	if err := r.ParseForm(); err != nil {
		var tooLarge *http.MaxBytesError
		if errors.As(err, &tooLarge) {
			http.Error(w, fmt.Sprintf("form over %d bytes refused; nothing was done", maxFormBytes), http.StatusRequestEntityTooLarge)
			return false
		}
		http.Error(w, "malformed form refused; nothing was done", http.StatusBadRequest)
		return false
	}
	return true
}

// act guards an action: POST only (the mux), a form within bounds, same origin, the form token
// of the browser's session, then authentication; it runs do and
// redirects back. The form token guards the credentials a browser sends
// by itself (the sign-in cookie, basic authentication), which a page of
// another site could make it send; a script's bearer token is never sent
// by a browser on its own, so a request carrying it needs no form token.
func (c *Console) act(name string, do func(r *http.Request, who string) (string, error)) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		if !c.auth.enabled() {
			http.Error(w, "the console is read-only: configure a token or credentials to act", http.StatusForbidden)
			return
		}
		if !readForm(w, r) {
			return
		}
		if !sameOrigin(r) {
			http.Error(w, "cross-origin action refused", http.StatusForbidden)
			return
		}
		if !c.bearer(r) && !c.formToken(r) {
			http.Error(w, "missing or stale form token: reload the page", http.StatusForbidden)
			return
		}
		who := c.who(r)
		if who == "" {
			if c.auth.User != "" {
				w.Header().Set("WWW-Authenticate", `Basic realm="ffd console"`)
			}
			http.Error(w, "authentication required: sign in on /login with the console's token", http.StatusUnauthorized)
			return
		}
		back, err := do(r, who)
		if err != nil {
			c.fail(w, r, err)
			return
		}
		c.log.Info("console action", zap.String("action", name), zap.String("who", who),
			zap.String("target", clip(r.PathValue("id")+r.PathValue("lane"))), zap.String("remote", r.RemoteAddr))
		http.Redirect(w, r, back, http.StatusSeeOther)
	}
}

// login shows the token form (GET) and checks it (POST): a right token
// sets the sign-in cookie, so action forms need no token typed again.
func (c *Console) login(w http.ResponseWriter, r *http.Request) {
	if c.auth.Token == "" {
		http.Error(w, "the console has no token to sign in with", http.StatusNotFound)
		return
	}
	if r.Method == http.MethodPost && !readForm(w, r) {
		return
	}
	next := r.FormValue("next")
	if !strings.HasPrefix(next, "/") || strings.HasPrefix(next, "//") {
		next = "/flows"
	}
	if r.Method == http.MethodGet {
		c.render(w, r, "login", struct {
			page
			Next  string
			Wrong bool
		}{page: c.page(w, r, "Sign in"), Next: next})
		return
	}
	if !sameOrigin(r) || !c.formToken(r) {
		http.Error(w, "missing or stale form token: reload the page", http.StatusForbidden)
		return
	}
	if subtle.ConstantTimeCompare([]byte(r.PostFormValue("token")), []byte(c.auth.Token)) != 1 {
		c.log.Warn("console sign-in refused", zap.String("remote", r.RemoteAddr))
		w.WriteHeader(http.StatusUnauthorized)
		c.render(w, r, "login", struct {
			page
			Next  string
			Wrong bool
		}{page: c.page(w, r, "Sign in"), Next: next, Wrong: true})
		return
	}
	sess, _ := r.Cookie(sessionCookie) // formToken found it
	http.SetCookie(w, &http.Cookie{Name: signInCookie, Value: c.keys.sign("signin", sess.Value), Path: "/", HttpOnly: true,
		SameSite: http.SameSiteStrictMode, Secure: r.TLS != nil})
	c.log.Info("console sign-in", zap.String("remote", r.RemoteAddr))
	http.Redirect(w, r, next, http.StatusSeeOther)
}

// logout forgets the sign-in.
func (c *Console) logout(w http.ResponseWriter, r *http.Request) {
	if !readForm(w, r) {
		return
	}
	if !sameOrigin(r) || !c.formToken(r) {
		http.Error(w, "missing or stale form token: reload the page", http.StatusForbidden)
		return
	}
	http.SetCookie(w, &http.Cookie{Name: signInCookie, Value: "", Path: "/", MaxAge: -1, HttpOnly: true, SameSite: http.SameSiteStrictMode})
	http.Redirect(w, r, "/flows", http.StatusSeeOther)
}

// routeActions registers the actions.
func (c *Console) routeActions() {
	c.mux.HandleFunc("GET /login", c.login)
	c.mux.HandleFunc("POST /login", c.login)
	c.mux.HandleFunc("POST /logout", c.logout)
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
		id, err := ffdtype.ParseUUID("flow id", r.PathValue("id"))
		if err != nil {
			return "", err
		}
		// No default: each policy cancels differently, and a request
		// that names none (or one lost with a body cut short) must not
		// be taken for the one that cancels the most.
		policy := ffdtype.CancelPolicy(r.PostFormValue("policy"))
		if policy == "" {
			return "", fault.Invalid(ffdtype.KindRequired, "policy", "", "choose flow_only, cancel_pending or cancel_all")
		}
		_, err = flows.Cancel(r.Context(), c.pool, id, policy, "cancelled from the console by "+who)
		return "/flows/" + id.String(), err
	}))
	c.mux.HandleFunc("POST /actions/flows/{id}/rerun", c.act("rerun flow", func(r *http.Request, who string) (string, error) {
		id, err := ffdtype.ParseUUID("flow id", r.PathValue("id"))
		if err != nil {
			return "", err
		}
		sub, err := flows.RerunFlow(r.Context(), c.pool, leases.Limits{}, id)
		if err != nil {
			return "", err
		}
		return "/flows/" + sub.Flow.ID.String(), nil
	}))
	c.mux.HandleFunc("POST /actions/dead/rerun", c.act("rerun dead letters", c.rerunDead))
	for _, paused := range []bool{true, false} {
		name := map[bool]string{true: "pause", false: "resume"}[paused]
		c.mux.HandleFunc("POST /actions/lanes/{lane}/"+name, c.act(name+" lane", func(r *http.Request, who string) (string, error) {
			lane := r.PathValue("lane")
			if err := leases.ValidateName("lane", lane); err != nil {
				return "", err
			}
			_, err := store.SetLane(r.Context(), c.pool, lane, store.LaneChange{Paused: &paused})
			return "/lanes", err
		}))
	}
}
