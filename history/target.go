package history

import (
	"fmt"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"

	"github.com/jackc/pgx/v5"
)

// A history target is what history.path and --db name: an SQLite file,
// or a PostgreSQL history as a postgres:// or postgresql:// URL. Every
// other value that looks like a URL (a scheme in another case or
// spelling, a URL without //, a keyword/value connection string) is
// refused by CheckTarget before anything runs, rather than taken for a
// file name that a nightly would then create.

// IsURL reports whether target names a PostgreSQL history, a postgres://
// or postgresql:// URL (as pgx reads them: the scheme in lower case),
// rather than an SQLite file.
func IsURL(target string) bool {
	return strings.HasPrefix(target, "postgres://") || strings.HasPrefix(target, "postgresql://")
}

// Forms names the values a history target can take, for refusals.
const Forms = "a PostgreSQL history is postgres://USER@HOST[:PORT]/DATABASE (or postgresql://...; " +
	"a unix socket directory as ?host=/run/postgresql, the password in ~/.pgpass or PGPASSWORD); " +
	"an SQLite history is a file path (a file whose name has a colon as ./NAME)"

// schemeLike matches what starts a URL: a scheme (RFC 3986: a letter,
// then letters, digits, '+', '-' or '.') and its colon.
var schemeLike = regexp.MustCompile(`^[A-Za-z][A-Za-z0-9+.-]*:`)

// keywordForm matches a libpq keyword/value connection string
// ("host=db user=arpatch dbname=arpatch").
var keywordForm = regexp.MustCompile(`^\s*(host|hostaddr|port|user|dbname|service)\s*=`)

// CheckTarget checks a history target without opening it (no file is
// read, no server reached): a PostgreSQL URL must parse as pgx parses it
// (host, port 1 to 65535, parameters such as connect_timeout) and hold no
// password (arpatch prints the URL in its errors and reports); a value
// that looks like a URL or a connection string and is not a PostgreSQL
// URL is refused, naming the forms that work (Forms). A file path, and
// "", pass. The error does not name the setting (history.path, --db):
// the caller does.
func CheckTarget(target string) error {
	if IsURL(target) {
		_, err := pgConfig(target)
		return err
	}
	if strings.HasPrefix(target, "/") || strings.HasPrefix(target, ".") || strings.HasPrefix(target, "~") {
		return nil // a path, whatever colons it holds further on
	}
	if m := schemeLike.FindString(target); m != "" {
		scheme := strings.ToLower(strings.TrimSuffix(m, ":"))
		rest := target[len(m):]
		hint := ""
		switch {
		case (scheme == "postgres" || scheme == "postgresql") && strings.HasPrefix(rest, "//"):
			hint = fmt.Sprintf(" (write the scheme in lower case: %s:%s)", scheme, Redact(rest))
		case scheme == "postgres" || scheme == "postgresql" || scheme == "pg" || scheme == "pgsql":
			hint = " (a PostgreSQL URL starts postgres://)"
		}
		return fmt.Errorf("%q looks like a URL but is not a history arpatch reads%s: %s", Redact(target), hint, Forms)
	}
	if keywordForm.MatchString(target) {
		return fmt.Errorf("%q is a keyword/value connection string: arpatch takes a PostgreSQL history as a URL: %s", Redact(target), Forms)
	}
	return nil
}

// CheckKeep checks history.keep, the local history a night is kept in
// when its shared one fails: a file path, never a URL.
func CheckKeep(keep string) error {
	if IsURL(keep) {
		return fmt.Errorf("%q is a URL: history.keep is the local SQLite file a night is kept in when history.path's server fails (default STATE/nightly/KEY/kept.db)", Redact(keep))
	}
	return CheckTarget(keep)
}

// pgConfig parses a PostgreSQL URL as pgx does (reading PGHOST, PGUSER
// and the other defaults of libpq's environment), refusing one that
// holds a password; an unset connect_timeout becomes connectTimeout. The
// errors show the URL as Redact does, without pgx's own copy of it.
func pgConfig(raw string) (*pgx.ConnConfig, error) {
	if Redact(raw) != raw {
		return nil, fmt.Errorf("%s holds a password, which arpatch would print in its errors and reports: put it in ~/.pgpass or PGPASSWORD instead, and leave it out of the URL", Redact(raw))
	}
	cfg, err := pgx.ParseConfig(raw)
	if err != nil {
		msg := err.Error()
		// pgx says "cannot parse `URL`: why"; the URL is ours to print.
		if i := strings.Index(msg, "`: "); strings.HasPrefix(msg, "cannot parse `") && i > 0 {
			msg = msg[i+3:]
		}
		return nil, fmt.Errorf("%s: %s", raw, msg)
	}
	if cfg.ConnectTimeout == 0 {
		cfg.ConnectTimeout = connectTimeout
	}
	return cfg, nil
}

// Redact returns target as given, but for the password of a URL (in its
// user info, or a password= parameter), replaced by xxxxx. Nothing else
// changes: a URL is printed as its user wrote it, never re-encoded.
func Redact(target string) string {
	m := schemeLike.FindString(target)
	if m == "" || !strings.HasPrefix(target[len(m):], "//") {
		return target
	}
	head, rest := target[:len(m)+2], target[len(m)+2:]
	end := strings.IndexAny(rest, "/?#")
	if end < 0 {
		end = len(rest)
	}
	auth, tail := rest[:end], rest[end:]
	if at := strings.LastIndex(auth, "@"); at >= 0 {
		if colon := strings.Index(auth[:at], ":"); colon >= 0 {
			auth = auth[:colon+1] + "xxxxx" + auth[at:]
		}
	}
	if q := strings.Index(tail, "?"); q >= 0 {
		params := strings.Split(tail[q+1:], "&")
		for i, p := range params {
			if k, _, ok := strings.Cut(p, "="); ok && strings.EqualFold(k, "password") {
				frag := ""
				if h := strings.Index(p, "#"); h >= 0 {
					frag = p[h:]
				}
				params[i] = k + "=xxxxx" + frag
			}
		}
		tail = tail[:q+1] + strings.Join(params, "&")
	}
	return head + auth + tail
}

// identity names the database a PostgreSQL URL reaches, whatever the
// spelling: its servers (host names in lower case, socket directories
// cleaned, each with its port), user, database and search_path, as pgx
// resolves them with libpq's defaults. postgres:// and postgresql://,
// a default port written out or left out, and a trailing slash on a
// socket directory give one identity.
func identity(raw string) (string, error) {
	cfg, err := pgConfig(raw)
	if err != nil {
		return "", err
	}
	norm := func(host string, port uint16) string {
		if strings.HasPrefix(host, "/") {
			host = filepath.Clean(host)
		} else {
			host = strings.ToLower(host)
		}
		return host + ":" + strconv.Itoa(int(port))
	}
	servers := []string{norm(cfg.Host, cfg.Port)}
	for _, f := range cfg.Fallbacks {
		servers = append(servers, norm(f.Host, f.Port))
	}
	slices.Sort(servers)
	servers = slices.Compact(servers)
	return fmt.Sprintf("postgres servers=%s user=%s database=%s search_path=%s",
		strings.Join(servers, ","), cfg.User, cfg.Database, cfg.RuntimeParams["search_path"]), nil
}
