#pragma once
// How hpcbake reads a URL: as its transport does. libcurl parses the URL a transfer is given
// (CURLOPT_URL) with curl_url_set(CURLUPART_URL, url, CURLU_GUESS_SCHEME | CURLU_NON_SUPPORT_SCHEME)
// (lib/url.c, parseurlandfillconn, in libcurl 7.88: the one Debian 12 and the static release build
// have); this reads it the same way, with libcurl's own URL API, so the user name, password, host,
// query and fragment are the ones libcurl would send. Nothing else in hpcbake splits a URL.
//
// redact_url is the only way a URL reaches text (an error, a progress line, the plan, the journal,
// a log): it never returns a byte of a password, a user name, a query string (an Azure SAS token)
// or a fragment. url_problem refuses what hpcbake will not fetch from: anything but an explicit
// http:// or https:// URL that libcurl parses, and any URL a reader of its text could split
// differently from libcurl (an unencoded '/', '?', '#' or '@' in a password).
#include "util/error.hpp"

#include <optional>
#include <string>
#include <string_view>

namespace hpcbake::util {

// `url` with its user name and password replaced by "***" and its query string and fragment
// removed ("https://***@host/path"); `url` itself, byte for byte, when it has none of them and
// reads the same to libcurl and to a person. A URL libcurl does not parse, or parses differently
// from its text, is shown with everything before its last '@' replaced by "***@" (the scheme
// kept when it is written "scheme://"), then without anything from the first '?' or '#'. Control
// bytes are written \xNN, so the result is one line.
std::string redact_url(std::string_view url);

// Whether redact_url hides part of `url`: a user name, a password, a query string, a fragment, or
// a spelling libcurl reads differently. The stored plan keeps such a URL redacted only.
bool url_has_secret(std::string_view url);

// Why hpcbake will not fetch from `url`, as a phrase that follows the URL ("has no scheme: ...");
// nothing when it will. Refused: an empty URL, control bytes or spaces, a scheme other than an
// explicit http:// or https:// (no scheme, "//host", "https:/host", "https:///host"), anything
// libcurl's URL parser refuses (its reason is given), and an '@' after the host (libcurl ends the
// host at the first '/', '?' or '#', so "https://user:pa/ss@host/" would go to the host "user").
std::optional<std::string> url_problem(std::string_view url);

// url_problem as an error of `kind` naming `where` ("--mirror", a manifest field) and the URL
// redacted, with what to write instead.
Status check_url(std::string_view url, std::string_view where, ErrorKind kind = ErrorKind::usage);

// The hint of check_url's error: how to write a URL hpcbake accepts.
const char* url_hint();

// The URL without its user name and password, everything else kept (the same resource, whatever
// credentials reach it); redact_url(url) when libcurl does not parse it cleanly.
std::string strip_userinfo(std::string_view url);

} // namespace hpcbake::util
