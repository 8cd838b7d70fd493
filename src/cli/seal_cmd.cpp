#include "cli/seal_cmd.hpp"
#include "cli/progress.hpp"
#include "cli/report.hpp"
#include "cli/test_runner.hpp"
#include "util/preflight.hpp"

#include "detect/host.hpp"
#include "exec/runner.hpp"
#include "manifest/manifests.hpp"
#include "seal/seal.hpp"
#include "seal/uefi_db.hpp"
#include "util/atomic_file.hpp"
#include "util/build_config.hpp"
#include "util/datadir.hpp"
#include "util/error.hpp"
#include "util/hostfs.hpp"
#include "util/http.hpp"
#include "util/json.hpp"
#include "util/strings.hpp"

#include <fmt/format.h>
#include <nlohmann/json.hpp>
#include <unistd.h>

#include <algorithm>

namespace hpcbake::cli {

namespace {

nlohmann::json refusals_json(const seal::SealReport& rep) {
  nlohmann::json out = nlohmann::json::array();
  for (const auto& r : rep.refusals)
    out.push_back({{"id", r.id}, {"message", r.message}, {"hint", r.hint}});
  return out;
}

nlohmann::json health_units_json(const seal::SealReport& rep) {
  nlohmann::json out = nlohmann::json::array();
  for (const auto& u : rep.health_units)
    out.push_back({{"unit", u.name},
                   {"path", u.path},
                   {"wants_link", u.wants_link.empty() ? nlohmann::json(nullptr) : nlohmann::json(u.wants_link)},
                   {"exec_start", u.exec_start.empty() ? nlohmann::json(nullptr) : nlohmann::json(u.exec_start)},
                   {"text", u.text}});
  return out;
}

// The --uefi-db-json request, checked before seal changes anything (a flag, or a --cert, that is
// wrong stops the command first); std::nullopt without --uefi-db-json. Without --cert the
// certificate is the stored plan's, known once seal has read it (uefi_db_write).
Result<std::optional<seal::UefiDbRequest>> uefi_db_request(const SealOptions& o) {
  const bool any = !o.cert.empty() || !o.source_id.empty() || !o.location.empty() || !o.target_regions.empty();
  if (o.uefi_db_json.empty()) {
    if (any)
      return fail(ErrorKind::usage,
                  "--cert, --source-id, --location and --target-region describe the --uefi-db-json body",
                  "add --uefi-db-json FILE, or leave them out");
    return std::optional<seal::UefiDbRequest>{};
  }
  if (o.deprovision)
    return fail(
        ErrorKind::usage,
        "--uefi-db-json with --deprovision would write the body onto the disk being captured, "
        "after the session that could fetch it has ended",
        "write it first with 'hpcbake seal --check --uefi-db-json FILE ...', fetch it, then seal --deprovision");
  if (o.source_id.empty() || o.location.empty())
    return fail(ErrorKind::usage, "--uefi-db-json needs --source-id (the image to publish) and --location (its region)",
                "see 'hpcbake help seal' and docs/secure-boot.md (the image's UEFI db)");
  seal::UefiDbRequest rq;
  rq.source_id = o.source_id;
  rq.location = o.location;
  rq.target_regions = o.target_regions;
  if (o.cert.empty()) {
    HPCBAKE_TRY(seal::check_uefi_db_request(rq));
  } else {
    rq.cert = std::filesystem::absolute(o.cert);
    HPCBAKE_TRY(seal::uefi_db_body(rq)); // the certificate too
  }
  return std::optional<seal::UefiDbRequest>{std::move(rq)};
}

// Writes the body for a machine seal accepted (atomically). The default certificate is the one
// the stored plan signs with (seal::signing_certificate: its --sign-cert, or its --key-dir's
// signing.der).
Status uefi_db_write(seal::UefiDbRequest rq, const util::HostFs& host, const seal::SealResult& result,
                     const std::filesystem::path& path) {
  if (rq.cert.empty()) rq.cert = host.resolve(seal::signing_certificate(host, result.report));
  auto body = seal::uefi_db_body(rq);
  if (!body && result.sealed)
    return fail(body.error().kind,
                fmt::format("the machine is sealed ({}), but {} was not written: {}", result.manifest_path,
                            path.string(), body.error().message),
                body.error().hint);
  if (!body) return std::unexpected(body.error());
  return util::write_file_atomic(path, util::dump_json(*body, 2) + "\n");
}

// Without --cert the modules were judged against the stored plan's certificate: one that cannot be
// read is the first thing to fix (usage), before the image refusals it would have answered.
Status default_cert_first(const std::optional<seal::UefiDbRequest>& rq, const util::HostFs& host,
                          const seal::SealReport& rep) {
  if (!rq || rep.ok() || !rq->cert.empty() ||
      std::none_of(rep.refusals.begin(), rep.refusals.end(),
                   [](const seal::Refusal& r) { return r.id == "module.image-secure-boot"; }))
    return {};
  auto req = *rq;
  req.cert = host.resolve(seal::signing_certificate(host, rep));
  if (auto body = seal::uefi_db_body(req); !body) return std::unexpected(body.error());
  return {};
}

// The health units seal writes (or, with --check, would write) and enables (docs/health.md).
void print_health_units(const seal::SealReport& rep, bool check_only, std::ostream& out) {
  for (const auto& u : rep.health_units)
    out << fmt::format("seal: {} {}{}{}\n", check_only ? "would write" : "wrote", u.path,
                       u.wants_link.empty() ? " (started by hpcbake-verify.timer)"
                                            : fmt::format(", enabled: {} -> {}", u.wants_link, u.path),
                       u.exec_start.empty() ? "" : fmt::format("; ExecStart={}", u.exec_start));
}

seal::SealRequest seal_request(const SealOptions& o, const util::HostFs& host, const detect::HostFacts& facts,
                               exec::Runner& runner, const std::optional<seal::UefiDbRequest>& uefi_db) {
  seal::SealRequest rq;
  rq.fs = &host;
  rq.host = &facts;
  rq.runner = &runner;
  rq.signing_key = o.remove_signing_key ? seal::SigningKey::remove : seal::SigningKey::refuse;
  rq.deprovision = o.deprovision ? seal::Deprovision::yes : seal::Deprovision::no;
  rq.verify_deferred = o.verify == "deferred";
  rq.hpcbake_version = build::version;
  if (const auto exe = util::self_exe()) rq.hpcbake_exe = exe->string(); // the health units run this one
  if (uefi_db) {
    rq.uefi_db = true; // the modules are judged as the image's VMs will, Secure Boot on
    rq.uefi_db_cert = uefi_db->cert;
  }
  return rq;
}

int cmd_seal(const SealOptions& o, const std::string& root, std::ostream& out, std::ostream& err) {
  const util::HostFs host(root);
  auto uefi_db = uefi_db_request(o);
  if (!uefi_db) return report(uefi_db.error(), err);
  auto runner = make_runner(host);
  // Under a fixture --root the agent that would run is this machine's, not the tree's: refuse,
  // unless commands are only being recorded (the Packer test seals a fixture machine).
  if (o.deprovision && !exec::may_act_on_machine(host, *runner))
    return report(
        Error{ErrorKind::usage,
              fmt::format("--deprovision generalizes the machine hpcbake runs on, not the tree under --root {}", root),
              "seal a --root tree without --deprovision"},
        err);
  // Even --check runs as root: the secret scan must read every file, and what it judges (the
  // stored plan, the journal, the verify record, the cache it empties) must be root's alone. The
  // manifests are not read: the plan is the one the install stored.
  if (o.check_only && ::geteuid() != 0 && host.is_real_root())
    return report(Error{ErrorKind::permission,
                        fmt::format("seal --check changes nothing, but reads what only root may read (the secret scan "
                                    "reads every file; the stored plan, the journal and the verify record are root's) "
                                    "and hpcbake runs as uid {}",
                                    ::geteuid()),
                        "run it as root; to check a copy of a machine's files instead, pass --root DIR"},
                  err);
  if (auto s = util::preflight("seal", host,
                               {{host.resolve(seal::kStateDir), "state directory", 1, {}},
                                {host.resolve(seal::kCacheDir), "artifact cache", -1, {}}});
      !s)
    return report(s.error(), err);
  // Seal needs kernels and os-release only: the metadata service is never asked (the size
  // comes from the stored plan).
  util::CurlHttpClient http;
  detect::ImdsOptions imds;
  imds.enabled = false;
  const auto facts = detect::detect_host(host, http, imds, nullptr);

  auto rq = seal_request(o, host, facts, *runner, *uefi_db);

  seal::SealResult result;
  if (o.check_only) {
    auto rep = seal::check(rq);
    if (!rep) return report(rep.error(), err);
    result.report = std::move(*rep);
  } else {
    auto r = seal::seal(rq);
    if (!r) return report(r.error(), err);
    result = std::move(*r);
  }
  const auto& rep = result.report;
  // Written only for a machine that can be sealed (nothing is written when seal refuses).
  const auto body_path = o.uefi_db_json.empty() ? std::filesystem::path() : std::filesystem::absolute(o.uefi_db_json);
  if (*uefi_db && rep.ok())
    if (auto s = uefi_db_write(**uefi_db, host, result, body_path); !s) return report(s.error(), err);
  if (auto s = default_cert_first(*uefi_db, host, rep); !s) return report(s.error(), err);

  if (o.json) {
    nlohmann::json doc = {
        {"schema", 1},
        {"sealable", rep.ok()},
        {"sealed", result.sealed},
        {"refusals", refusals_json(rep)},
        {"manifest_path", result.sealed ? nlohmann::json(result.manifest_path) : nlohmann::json(nullptr)},
        {"sbom_path", result.sealed ? nlohmann::json(result.sbom_path) : nlohmann::json(nullptr)},
        {"deprovisioned", result.deprovisioned},
        {"health_units", health_units_json(rep)},
        {"uefi_db_json", *uefi_db && rep.ok() ? nlohmann::json(body_path.string()) : nlohmann::json(nullptr)}};
    out << util::dump_json(doc, 2) << "\n";
  }
  if (!rep.ok()) {
    err << fmt::format("hpcbake: seal refused: {} reason{}; nothing was changed\n", rep.refusals.size(),
                       rep.refusals.size() == 1 ? "" : "s");
    for (const auto& r : rep.refusals) {
      err << fmt::format("  - [{}] {}\n", r.id, r.message);
      if (!r.hint.empty()) err << fmt::format("    hint: {}\n", r.hint);
    }
    return static_cast<int>(ExitCode::unsupported);
  }
  if (o.json) return 0;
  if (*uefi_db)
    out << fmt::format("seal: wrote {}: PUT it as the image version (api-version {}), see docs/secure-boot.md\n",
                       body_path.string(), seal::kGalleryApiVersion);
  print_health_units(rep, o.check_only, out);
  if (o.check_only) {
    out << fmt::format("seal: this machine can be sealed ({} modules for {}, {} held packages, {} files scanned)\n",
                       rep.modules.size(), rep.next_boot_kernel, rep.packages.size(), rep.scan.files_scanned);
    return 0;
  }
  for (const auto& k : result.removed_keys)
    out << fmt::format("seal: removed the signing key {}\n", k);
  out << fmt::format("seal: cache {} emptied ({} files, {})\n", seal::kCacheDir, result.cache_files_removed,
                     human_bytes(result.cache_bytes_freed));
  out << fmt::format("seal: wrote {} ({} components, {} modules for {})\n", result.manifest_path,
                     result.manifest["components"].size(), rep.modules.size(), rep.next_boot_kernel);
  out << fmt::format("seal: wrote {} (SPDX 2.3: the same components, for a vulnerability scanner)\n", result.sbom_path);
  if (result.deprovisioned)
    out << fmt::format("seal: ran {}: shut the VM down and capture it now\n",
                       exec::shell_quote(seal::deprovision_argv()));
  return 0;
}

} // namespace

SealCommands add_seal_commands(CLI::App& app, SealOptions& o) {
  SealCommands c;
  auto* s = app.add_subcommand("seal", "check this machine is ready to become an image, clean up, write the image "
                                       "manifest (exit 3 with every reason when it is not ready)");
  c.seal = s;
  s->add_flag("--deprovision", o.deprovision, "run 'waagent -force -deprovision+user' as the last step");
  s->add_flag("--remove-signing-key", o.remove_signing_key,
              "delete the module-signing private key the install used (its --key-dir, default "
              "/var/lib/hpcbake/signing) instead of refusing");
  s->add_flag("--check", o.check_only, "only list what blocks sealing; change nothing");
  s->add_option("--verify", o.verify,
                "passed (default): verify must have passed in this boot, hardware checks included; deferred: also "
                "accept a verify that deferred the hardware checks (install/verify --hardware-checks deferred, a "
                "bake on another machine): the image manifest records the hardware verdict as pending, and the "
                "image's boot unit runs those checks at its first boot on the size")
      ->check(CLI::IsMember({"passed", "deferred"}))
      ->option_text("passed|deferred");
  s->add_option("--uefi-db-json", o.uefi_db_json,
                "when the machine can be sealed, also write the Azure Compute Gallery image version request body whose "
                "UEFI db holds the module-signing certificate (docs/secure-boot.md); not with --deprovision")
      ->option_text("FILE");
  s->add_option("--cert", o.cert,
                "the certificate for --uefi-db-json, PEM or DER (default: the one the stored plan signs with: "
                "the install's --sign-cert, or signing.der in its --key-dir)")
      ->option_text("FILE");
  s->add_option("--source-id", o.source_id,
                "for --uefi-db-json: ARM id of the managed image, gallery image version or VM the version is made from")
      ->option_text("ID");
  s->add_option("--location", o.location, "for --uefi-db-json: the image version's region")->option_text("REGION");
  s->add_option("--target-region", o.target_regions,
                "for --uefi-db-json: a region to replicate to; repeatable (default: --location)")
      ->option_text("REGION");
  return c;
}

std::optional<int> run_seal_command(const SealCommands& cmds, const SealOptions& o, const std::string& root,
                                    std::ostream& out, std::ostream& err) {
  if (cmds.seal && cmds.seal->parsed()) return cmd_seal(o, root, out, err);
  return std::nullopt;
}

} // namespace hpcbake::cli
