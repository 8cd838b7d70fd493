// Passwords and tokens in every URL spelling (issue 40, item 5): redact_url never returns a byte
// of them, url_problem refuses what libcurl reads otherwise than its text reads, and check_url's
// error names the option and shows the URL redacted. The URLs are built here from the issue's
// description; each row's secrets are the bytes that must never come out.
#include "util/url.hpp"

#include <doctest/doctest.h>

#include <string>
#include <vector>

using namespace hpcbake::util;

namespace {

struct Spelling {
  const char* what;
  std::string url;
  std::vector<std::string> secrets; // fragments of the password, user name or token
  std::string redacted;             // what redact_url shows
  const char* refused;              // part of url_problem's answer; nullptr: accepted
};

std::vector<Spelling> spellings() {
  using namespace std::string_literals;
  return {
      // The spellings.
      {"no scheme", "Uname:Sx1secret@host/m", {"Uname", "Sx1secret"}, "***@host/m", "does not start with http"},
      {"'//' without a scheme", "//Uname:Sx2secret@host/m", {"Uname", "Sx2secret"}, "***@host/m", "starts with '//'"},
      {"unencoded '/' in the password",
       "https://Uname:Sx3a/Sx3b@host/m",
       {"Uname", "Sx3a", "Sx3b"},
       "https://***@host/m",
       "libcurl reads"},
      {"unencoded '/' after a numeric password start",
       "https://Uname:123/Sx4b@host/m",
       {"Uname", "123", "Sx4b"},
       "https://***@host/m",
       "an '@' after its host"},
      {"unencoded '?' in the password",
       "https://Uname:Sx5a?Sx5b@host/m",
       {"Uname", "Sx5a", "Sx5b"},
       "https://***@host/m",
       "libcurl reads"},
      {"unencoded '?' after a numeric password start",
       "https://Uname:456?Sx6b@host/m",
       {"Uname", "456", "Sx6b"},
       "https://***@host/m",
       "an '@' after its host"},
      {"unencoded '#' in the password",
       "https://Uname:789#Sx7b@host/m",
       {"Uname", "789", "Sx7b"},
       "https://***@host/m",
       "an '@' after its host"},
      // And the others a transport or a person may meet.
      {"%-encoded password",
       "https://Uname:Sx8a%2FSx8b%3F%23@host/m",
       {"Uname", "Sx8a", "Sx8b"},
       "https://***@host/m",
       nullptr},
      {"%-encoded '@' in the password",
       "https://Uname:Sx9a%40Sx9b@host/m",
       {"Uname", "Sx9a", "Sx9b"},
       "https://***@host/m",
       nullptr},
      {"unencoded '@' in the password",
       "https://Uname:Sx10a@Sx10b@host/m",
       {"Uname", "Sx10a", "Sx10b"},
       "https://***@host/m",
       "libcurl reads"},
      {"IPv6 host with a port",
       "https://Uname:Sx11@[2001:db8::1]:8443/m",
       {"Uname", "Sx11"},
       "https://***@[2001:db8::1]:8443/m",
       nullptr},
      {"IPv6 host, nothing secret", "http://[::1]:8080/m", {}, "http://[::1]:8080/m", nullptr},
      {"user without a password", "https://Sx12token@host/m", {"Sx12token"}, "https://***@host/m", nullptr},
      {"empty user name", "https://:Sx13@host/m", {"Sx13"}, "https://***@host/m", nullptr},
      {"';' in the password",
       "https://Uname:Sx14a;Sx14b@host/m",
       {"Uname", "Sx14a", "Sx14b"},
       "https://***@host/m",
       nullptr},
      {"SAS query string",
       "https://acct.blob.core.windows.net/c/f.run?sv=2021-08-06&sr=b&sig=Sx15sig%3D",
       {"sv=", "sig=", "Sx15sig"},
       "https://acct.blob.core.windows.net/c/f.run",
       nullptr},
      {"password and SAS",
       "https://Uname:Sx16@mirror.example:8443/c/f.run?sig=Sx16sig",
       {"Uname", "Sx16", "Sx16sig"},
       "https://***@mirror.example:8443/c/f.run",
       nullptr},
      {"fragment", "https://host/m#Sx17", {"Sx17"}, "https://host/m", nullptr},
      {"upper-case scheme", "HTTPS://Uname:Sx18@Host/m", {"Uname", "Sx18"}, "https://***@Host/m", nullptr},
      {"one slash after the scheme",
       "https:/Uname:Sx19@host/m",
       {"Uname", "Sx19"},
       "***@host/m",
       "does not start with http"},
      {"three slashes after the scheme",
       "https:///Uname:Sx20@host/m",
       {"Uname", "Sx20"},
       "https://***@host/m",
       "more than two '/'"},
      {"no slash after the scheme", "https:Uname:Sx21@host/m", {"Uname", "Sx21"}, "***@host/m", "does not start with"},
      {"another scheme", "ftp://Uname:Sx22@host/m", {"Uname", "Sx22"}, "ftp://***@host/m", "not http:// or https://"},
      {"a NUL byte", "https://Uname:Sx23@host/m\0tail"s, {"Uname", "Sx23"}, "https://***@host/m\\x00tail", "NUL byte"},
      {"a line break in the password",
       "https://Uname:Sx24a\nSx24b@host/m",
       {"Uname", "Sx24a", "Sx24b"},
       "https://***@host/m",
       "control character"},
      {"'@' in the query", "https://host/m?sig=Sx25@x", {"Sx25"}, "https://***@x", "an '@' after its host"},
      {"plain URL", "https://host/m/f.run", {}, "https://host/m/f.run", nullptr},
      {"plain URL without a path", "http://169.254.169.254", {}, "http://169.254.169.254", nullptr},
  };
}

} // namespace

TEST_CASE("redact_url: no spelling of a URL lets a byte of its password or token out") {
  for (const auto& s : spellings()) {
    const std::string what = s.what;
    CAPTURE(what);
    const std::string shown = redact_url(s.url);
    CHECK(shown == s.redacted);
    for (const auto& secret : s.secrets)
      CHECK(shown.find(secret) == std::string::npos);
    CHECK(url_has_secret(s.url) == !s.secrets.empty());
  }
}

TEST_CASE("url_problem refuses what libcurl would read otherwise than its text reads") {
  for (const auto& s : spellings()) {
    const std::string what = s.what;
    CAPTURE(what);
    const auto why = url_problem(s.url);
    if (!s.refused) {
      CHECK_FALSE(why.has_value());
      continue;
    }
    REQUIRE(why.has_value());
    CHECK(why->find(s.refused) != std::string::npos);
    for (const auto& secret : s.secrets)
      CHECK(why->find(secret) == std::string::npos);
  }
  CHECK(url_problem("") == std::string("is empty"));
  CHECK(url_problem("https://host/p@q").has_value()); // an '@' in the path reads as userinfo to some
}

TEST_CASE("check_url names the option and shows the URL redacted") {
  for (const auto& s : spellings()) {
    const std::string what = s.what;
    CAPTURE(what);
    const auto st = check_url(s.url, "--mirror");
    CHECK(st.has_value() == (s.refused == nullptr));
    if (st) continue;
    const auto& e = st.error();
    CHECK(e.kind == hpcbake::ErrorKind::usage);
    CHECK(e.message.starts_with("--mirror: '" + s.redacted + "' "));
    for (const auto& secret : s.secrets) {
      CHECK(e.message.find(secret) == std::string::npos);
      CHECK(e.hint.find(secret) == std::string::npos);
    }
  }
}

TEST_CASE("strip_userinfo drops the user name and password and keeps the rest") {
  CHECK(strip_userinfo("https://Uname:pa55@h/p?sig=S") == "https://h/p?sig=S");
  CHECK(strip_userinfo("https://h/p") == "https://h/p");
  CHECK(strip_userinfo("https://Uname:pa55@[::1]:81/p") == "https://[::1]:81/p");
  CHECK(strip_userinfo("https://Uname:pa/55@h/p").find("pa") == std::string::npos);
}
