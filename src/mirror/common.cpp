#include "mirror/common.hpp"

#include "util/atomic_file.hpp"
#include "util/hostfs.hpp"
#include "util/paths.hpp"
#include "util/sha256.hpp"
#include "util/strings.hpp"
#include "util/url.hpp"

#include <archive.h>
#include <archive_entry.h>
#include <fmt/format.h>

#include <memory>

namespace hpcbake::mirror::detail {

namespace fs = std::filesystem;

namespace {
struct ArchiveFree {
  void operator()(archive* a) const { archive_read_free(a); }
};
} // namespace

Result<std::string> http_get(const Env& env, const std::string& url, std::size_t max) {
  util::HttpRequest rq;
  rq.url = url;
  rq.connect_timeout_ms = static_cast<long>(env.fetch.connect_timeout_s * 1000);
  rq.timeout_ms = 120'000;
  rq.max_body_bytes = max;
  rq.follow_redirects = true;
  rq.ca_file = env.fetch.ca_file;
  HPCBAKE_TRY_ASSIGN(auto got, env.http->get(rq));
  if (got.status != 200) return fail(ErrorKind::fetch, fmt::format("{}: HTTP {}", util::redact_url(url), got.status));
  return std::move(got.body);
}

Result<plan::MirrorFile> put_bytes(const fetch::Cache& cache, const std::string& path, const std::string& bytes) {
  HPCBAKE_TRY_ASSIGN(auto sha, util::sha256_of(bytes));
  if (!cache.has(sha)) {
    HPCBAKE_TRY(cache.ensure_layout());
    HPCBAKE_TRY(util::write_file_atomic(cache.part(sha), bytes));
    HPCBAKE_TRY(cache.publish(sha));
  }
  return plan::MirrorFile{path, sha, bytes.size()};
}

Result<PinnedKey> pinned_key(const plan::RepositoryStep& r, const Env& env, const std::string& label) {
  std::vector<std::string> tried;
  for (const auto& url : r.key_urls) {
    auto got = http_get(env, url, kMaxKeyBytes);
    if (!got) {
      tried.push_back(got.error().message);
      continue;
    }
    HPCBAKE_TRY_ASSIGN(auto k, repo::verify_pinned_key(*got, r.fingerprint, util::redact_url(url)));
    HPCBAKE_TRY_ASSIGN(auto file, put_bytes(fetch::Cache(env.fetch.cache_dir), paths::kRepoMirrorKey, *got));
    return PinnedKey{std::move(k), std::move(file)};
  }
  return fail(ErrorKind::fetch, fmt::format("{}: no URL gave its key: {}", label, util::join(tried, "; ")),
              "check the network or proxy");
}

Result<std::string> gpgv(const Env& env, const repo::KeyFile& key, const std::string& signed_file,
                         const std::string* detached, const std::string& label) {
  std::error_code ec;
  fs::create_directories(env.scratch / "gnupg", ec);
  fs::permissions(env.scratch / "gnupg", fs::perms::owner_all, ec);
  const fs::path keyring = env.scratch / "pinned.gpg", data = env.scratch / "signed", sig = env.scratch / "signature",
                 out = env.scratch / "extracted";
  HPCBAKE_TRY(util::write_file_atomic(keyring, key.binary));
  HPCBAKE_TRY(util::write_file_atomic(data, signed_file));
  fs::remove(out, ec);
  exec::Command c;
  c.argv = {"gpgv", "--keyring", keyring.string()};
  if (detached) {
    HPCBAKE_TRY(util::write_file_atomic(sig, *detached));
    c.argv.insert(c.argv.end(), {sig.string(), data.string()});
  } else {
    c.argv.insert(c.argv.end(), {"--output", out.string(), data.string()});
  }
  c.env = {"GNUPGHOME=" + (env.scratch / "gnupg").string(), "LC_ALL=C"};
  c.timeout = std::chrono::seconds(60);
  HPCBAKE_TRY_ASSIGN(auto r, env.runner->run(c));
  if (!r.ok())
    return fail(ErrorKind::fetch,
                fmt::format("{}: the signature does not verify with the pinned key (gpgv {}): {}", label, r.describe(),
                            std::string(util::trim(r.output))),
                "the repository's metadata was changed or is signed by another key: do not use it; check the "
                "manifest's pin against the vendor's published fingerprint");
  if (detached) return signed_file;
  return util::read_small_file(out, kMaxMetadataBytes);
}

Status read_index(const fs::path& file, const std::string& label,
                  const std::function<Status(std::string_view, bool last)>& sink) {
  std::unique_ptr<archive, ArchiveFree> a(archive_read_new());
  archive_read_support_filter_all(a.get());
  archive_read_support_format_raw(a.get());
  archive_read_support_format_empty(a.get());
  if (archive_read_open_filename(a.get(), file.c_str(), 1 << 16) != ARCHIVE_OK)
    return fail(ErrorKind::fetch, fmt::format("{}: {}", label, archive_error_string(a.get())));
  archive_entry* e = nullptr;
  if (archive_read_next_header(a.get(), &e) != ARCHIVE_OK) return sink({}, true);
  std::vector<char> buf(1 << 16);
  la_ssize_t n;
  while ((n = archive_read_data(a.get(), buf.data(), buf.size())) > 0)
    HPCBAKE_TRY(sink(std::string_view(buf.data(), static_cast<std::size_t>(n)), false));
  if (n < 0) return fail(ErrorKind::fetch, fmt::format("{}: {}", label, archive_error_string(a.get())));
  return sink({}, true);
}

Status download(const Env& env, const std::vector<fetch::Job>& jobs) {
  HPCBAKE_TRY_ASSIGN(auto rep, fetch::download(jobs, env.fetch, *env.observer));
  for (const auto& r : rep.results)
    if (!r.ok) return fail(ErrorKind::fetch, r.error, "check the network; a re-run resumes what was downloaded");
  return {};
}

std::vector<std::string> requests_of(const plan::Plan& plan, const std::string& id, bool soft) {
  std::vector<std::string> out;
  for (const auto& s : plan.steps)
    if (const auto* p = s.as<plan::PackagesStep>(); p && p->repository == id && p->component.empty() == soft)
      out.insert(out.end(), p->packages.begin(), p->packages.end());
  return out;
}

} // namespace hpcbake::mirror::detail
