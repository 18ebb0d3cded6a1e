package history

import (
	"fmt"
	"net/url"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
)

// A history target is what history.path and --db name: an SQLite file,
// or a PostgreSQL history as a postgres:// or postgresql:// URL. Every
// other value that looks like a URL (a scheme in another case or
// spelling, a URL without //, a keyword/value connection string,
// USER@HOST/DATABASE without a scheme) is
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
	"an SQLite history is a file path (one whose name reads as a URL or a connection string as ./NAME)"

// schemeLike matches what starts a URL: a scheme (RFC 3986: a letter,
// then letters, digits, '+', '-' or '.') and its colon.
var schemeLike = regexp.MustCompile(`^[A-Za-z][A-Za-z0-9+.-]*:`)

// noColon matches a PostgreSQL URL that lost its scheme's colon
// ("postgres//db/arpatch"), which would otherwise be a relative path:
// a directory named postgres.
var noColon = regexp.MustCompile(`^(?i)(postgres|postgresql|pg|pgsql)//`)

// userHost matches a PostgreSQL URL that lost its scheme
// ("postgres@127.0.0.1/arpatch"): a first path element holding an '@'
// with a host after it, which would otherwise be a relative path (a
// directory "postgres@127.0.0.1").
var userHost = regexp.MustCompile(`^[^/@]+@[^/@]+(/|$)`)

// keywordForm matches a libpq keyword/value connection string
// ("host=db user=arpatch dbname=arpatch"): a value starting with a
// connection keyword of libpq or pgx and '='.
// Upstream: postgres src/interfaces/libpq/fe-connect.c@REL_15_18 (PQconninfoOptions);
// pgx pgconn/config.go@v5.13.0 (ParseConfigWithOptions: notRuntimeParams).
var keywordForm = regexp.MustCompile(`^\s*(host|hostaddr|port|dbname|database|user|password|passfile|channel_binding|require_auth|connect_timeout|` +
	`client_encoding|options|application_name|fallback_application_name|keepalives|keepalives_idle|keepalives_interval|keepalives_count|` +
	`tcp_user_timeout|replication|gssencmode|sslmode|sslnegotiation|requiressl|sslcompression|sslcert|sslcertmode|sslkey|sslpassword|` +
	`sslrootcert|sslcrl|sslcrldir|sslsni|requirepeer|ssl_min_protocol_version|ssl_max_protocol_version|min_protocol_version|max_protocol_version|` +
	`krbsrvname|krbspn|gsslib|service|servicefile|target_session_attrs)\s*=`)

// CheckTarget checks a history target without opening it (no file is
// read, no server reached): a PostgreSQL URL must parse as pgx parses it
// (host, port 1 to 65535, parameters such as connect_timeout) and hold no
// password (arpatch prints the URL in its errors and reports); a value
// that looks like a URL or a connection string and is not a PostgreSQL
// URL is refused, naming the forms that work (Forms), its passwords
// shown as Redact shows them. A file path, and "", pass. The error does
// not name the setting (history.path, --db): the caller does.
func CheckTarget(target string) error {
	if IsURL(target) {
		_, err := pgConfig(target)
		return err
	}
	if isPath(target) {
		return nil // a path, whatever colons it holds further on
	}
	if noColon.MatchString(target) {
		return fmt.Errorf("%q looks like a PostgreSQL URL without the colon after its scheme (postgres://...): %s", Redact(target), Forms)
	}
	if m := schemeLike.FindString(target); m != "" {
		scheme := strings.ToLower(strings.TrimSuffix(m, ":"))
		rest := target[len(m):]
		hint := ""
		switch {
		case (scheme == "postgres" || scheme == "postgresql") && strings.HasPrefix(rest, "//"):
			hint = fmt.Sprintf(" (write the scheme in lower case: %s)", Redact(scheme+":"+rest))
		case scheme == "postgres" || scheme == "postgresql" || scheme == "pg" || scheme == "pgsql":
			hint = " (a PostgreSQL URL starts postgres://)"
		}
		return fmt.Errorf("%q looks like a URL but is not a history arpatch reads%s: %s", Redact(target), hint, Forms)
	}
	if keywordForm.MatchString(target) {
		return fmt.Errorf("%q is a keyword/value connection string: arpatch takes a PostgreSQL history as a URL: %s", Redact(target), Forms)
	}
	if userHost.MatchString(target) {
		r := Redact(target)
		return fmt.Errorf("%q looks like USER@HOST/DATABASE, a PostgreSQL URL without its scheme: write postgres://%s for a PostgreSQL history, or ./%s for an SQLite file of that name", r, r, r)
	}
	return nil
}

// isPath reports whether target is written as a path (absolute, or from
// . or ~), which CheckTarget takes as an SQLite file whatever it holds.
func isPath(target string) bool {
	return strings.HasPrefix(target, "/") || strings.HasPrefix(target, ".") || strings.HasPrefix(target, "~")
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
	if holdsPassword(raw) {
		return nil, fmt.Errorf("%s holds a password, which arpatch would print in its errors and reports: put it in ~/.pgpass or PGPASSWORD instead, and leave it out of the URL", Redact(raw))
	}
	cfg, err := pgx.ParseConfig(raw)
	if err != nil {
		msg := err.Error()
		// pgx says "cannot parse `URL`: why"; the URL is ours to print.
		if i := strings.Index(msg, "`: "); strings.HasPrefix(msg, "cannot parse `") && i > 0 {
			msg = msg[i+3:]
		}
		return nil, fmt.Errorf("%s: %s", Redact(raw), msg)
	}
	if cfg.ConnectTimeout == 0 {
		cfg.ConnectTimeout = connectTimeout
	}
	return cfg, nil
}

// holdsPassword reports whether target holds a password where Redact
// finds one, whatever it is: one that is Redact's own mask (xxxxx, as a
// remedy prints a URL) is found with that mask spelt otherwise first.
func holdsPassword(target string) bool {
	alt := strings.ReplaceAll(target, "xxxxx", "yyyyy")
	return Redact(target) != target || Redact(alt) != alt
}

// Redact returns target as given, but for its passwords, each replaced
// by xxxxx. In a PostgreSQL URL: every place pgx reads one from (the
// user info, up to the '@' that ends it as pgx's parser finds it, so a
// password holding '?', '#' or '/' is masked whole), and every query
// parameter whose key, %-decoded and in lower case, holds "password"
// (password=, sslpassword=, and PASSWORD= or Password=, which pgx would
// send the server as a setting), its value up to the next '&'. In any
// other value that is not a path (a look-alike CheckTarget refuses:
// another scheme or its spelling, postgres:/ with one slash, a URL
// without its colon, a keyword/value string, USER@HOST/DB), whatever
// looks like a password, more than pgx would read rather than less:
// the user info from the first ':' after the scheme and its slashes to
// the last '@' (or from the scheme's colon when no ':' precedes the
// '@': "u:pw@host" is a user and a password, not a scheme), each such
// query parameter, and each keyword PASSWORD = VALUE (any case, spaces
// around '=', the value quoted or not). The rest is printed as its user
// wrote it, never re-encoded; a path is returned as it is.
//
// Upstream: pgx pgconn/errors.go@v5.13.0 (ParseConfigError.Error,
// redactPW, redactURLPassword); pgx pgconn/config.go@v5.13.0
// (parseURLSettings: a key pgx does not know is a runtime parameter).
func Redact(target string) string {
	if isPath(target) {
		return target
	}
	if IsURL(target) {
		return maskKeys(pgxRedact(target))
	}
	prefix := lookPrefix.FindString(target)
	rest := target[len(prefix):]
	if i, j := strings.LastIndexByte(rest, '@'), strings.IndexByte(rest, ':'); i >= 0 && (j < 0 || j > i) &&
		strings.HasSuffix(prefix, ":") && schemeLike.MatchString(prefix) {
		// No ':' before the '@': the "scheme" was a user, its colon
		// the password's.
		prefix, rest = prefix[:len(prefix)-1], ":"+rest
	}
	rest = lookUserInfo.ReplaceAllString(rest, ":xxxxx@")
	rest = spacedPassword.ReplaceAllString(maskKeys(rest), "${1}xxxxx")
	return prefix + rest
}

// lookPrefix matches what starts a look-alike URL: a scheme and its
// colon with any slashes after it, or a PostgreSQL scheme that lost its
// colon.
var lookPrefix = regexp.MustCompile(`^([A-Za-z][A-Za-z0-9+.-]*:/*|(?i)(postgres|postgresql|pg|pgsql)//+)`)

// lookUserInfo matches a look-alike's password: from the first ':' to
// the last '@'.
var lookUserInfo = regexp.MustCompile(`(?s):.*@`)

// queryKey matches a query parameter's key and its '=', after the '?'
// or '&' that starts it.
var queryKey = regexp.MustCompile(`[?&]([^?&=#]*)=`)

// maskKeys replaces the value of each query parameter whose key,
// %-decoded and in lower case, holds "password", up to the next '&'
// (or the end), by xxxxx.
func maskKeys(s string) string {
	var b strings.Builder
	at := 0
	for _, m := range queryKey.FindAllStringSubmatchIndex(s, -1) {
		if m[0] < at {
			continue // inside a value already masked
		}
		key := s[m[2]:m[3]]
		if k, err := url.QueryUnescape(key); err == nil {
			key = k
		}
		if !strings.Contains(strings.ToLower(key), "password") {
			continue
		}
		end := strings.IndexByte(s[m[1]:], '&')
		if end < 0 {
			end = len(s) - m[1]
		}
		b.WriteString(s[at:m[1]])
		b.WriteString("xxxxx")
		at = m[1] + end
	}
	b.WriteString(s[at:])
	return b.String()
}

// pgxRedact is target as pgx's ParseConfigError prints it, its passwords
// masked, or unshown when pgx's text is not the one this reads.
func pgxRedact(target string) string {
	const pre, post = "cannot parse `", "`: "
	msg := pgconn.NewParseConfigError(target, "", nil).Error()
	if !strings.HasPrefix(msg, pre) || !strings.HasSuffix(msg, post) {
		return unshown
	}
	return strings.TrimSuffix(strings.TrimPrefix(msg, pre), post)
}

// unshown stands for a connection string Redact cannot mask: pgx's
// text changed, and none of it is printed.
const unshown = "(a connection string, not shown: it may hold a password)"

// spacedPassword matches a keyword/value password, in any case, written
// with or without spaces around its '=' (libpq takes "password = VALUE"):
// the value, quoted or not.
var spacedPassword = regexp.MustCompile(`(?i)(password\s*=\s*)('(?:[^'\\]|\\.)*'|[^\s']\S*)`)

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
