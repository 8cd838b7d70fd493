#include "util/sha256.hpp"

#include "util/fd.hpp"

#include <fmt/format.h>
#include <openssl/err.h>
#include <openssl/evp.h>

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <optional>
#include <vector>

namespace hpcbake::util {

namespace {

// OpenSSL's own reason for the last failure, when it left one.
std::string openssl_reason() {
  const unsigned long code = ERR_get_error();
  if (code == 0) return "no reason given";
  char buf[256];
  ERR_error_string_n(code, buf, sizeof buf);
  ERR_clear_error();
  return buf;
}

Error openssl_error(const char* call) {
  return Error{
      ErrorKind::internal, fmt::format("SHA-256: {} failed: {}", call, openssl_reason()),
      "OpenSSL could not compute a digest: check that libcrypto is installed intact and memory is not exhausted"};
}

} // namespace

struct Sha256::Impl {
  EVP_MD_CTX* ctx = EVP_MD_CTX_new();
  std::optional<Error> failed;
  Impl() {
    if (!ctx) failed = openssl_error("EVP_MD_CTX_new");
  }
  ~Impl() { EVP_MD_CTX_free(ctx); }
  Impl(const Impl&) = delete;
  Impl& operator=(const Impl&) = delete;
};

Sha256::Sha256() {
  static_cast<void>(reset());
} // a failure sticks in impl_->failed
Sha256::~Sha256() = default;
Sha256::Sha256(Sha256&&) noexcept = default;
Sha256& Sha256::operator=(Sha256&&) noexcept = default;

Status Sha256::reset() {
  if (!impl_ || !impl_->ctx) impl_ = std::make_unique<Impl>(); // moved from, or never allocated
  if (!impl_->ctx) return std::unexpected(*impl_->failed);
  impl_->failed.reset();
  if (EVP_DigestInit_ex(impl_->ctx, EVP_sha256(), nullptr) != 1) impl_->failed = openssl_error("EVP_DigestInit_ex");
  if (impl_->failed) return std::unexpected(*impl_->failed);
  return {};
}

Status Sha256::update(const void* data, std::size_t size) {
  if (!impl_)
    return fail(ErrorKind::internal, "SHA-256: update on a moved-from digest", "this is a bug in hpcbake: report it");
  if (!impl_->failed && EVP_DigestUpdate(impl_->ctx, data, size) != 1)
    impl_->failed = openssl_error("EVP_DigestUpdate");
  if (impl_->failed) return std::unexpected(*impl_->failed);
  return {};
}

Result<std::string> Sha256::hex() {
  if (!impl_)
    return fail(ErrorKind::internal, "SHA-256: hex of a moved-from digest", "this is a bug in hpcbake: report it");
  if (impl_->failed) return std::unexpected(*impl_->failed);
  unsigned char md[EVP_MAX_MD_SIZE];
  unsigned int len = 0;
  if (EVP_DigestFinal_ex(impl_->ctx, md, &len) != 1) {
    impl_->failed = openssl_error("EVP_DigestFinal_ex");
    return std::unexpected(*impl_->failed);
  }
  static constexpr char digits[] = "0123456789abcdef";
  std::string out;
  out.reserve(len * 2);
  for (unsigned int i = 0; i < len; ++i) {
    out += digits[md[i] >> 4];
    out += digits[md[i] & 0xf];
  }
  return out;
}

Result<std::uint64_t> Sha256::update_from_fd(int fd, std::string_view what) {
  // Not zero-filled: a std::vector would memset the whole 1 MiB for every file, which costs more
  // than hashing the small files (manifests) most calls are for.
  constexpr std::size_t kBuffer = 1 << 20;
  const std::unique_ptr<char[]> buf(new char[kBuffer]);
  std::uint64_t total = 0;
  while (true) {
    const ssize_t n = ::read(fd, buf.get(), kBuffer);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0)
      return fail(ErrorKind::internal, fmt::format("{}: read failed while hashing: {}", what, std::strerror(errno)),
                  "check the file's permissions and the disk (dmesg may show I/O errors)");
    if (n == 0) return total;
    HPCBAKE_TRY(update(buf.get(), static_cast<std::size_t>(n)));
    total += static_cast<std::uint64_t>(n);
  }
}

Result<std::string> sha256_file(const std::filesystem::path& path, std::uint64_t* bytes) {
  const Fd fd(::open(path.c_str(), O_RDONLY | O_CLOEXEC));
  if (!fd)
    return fail(ErrorKind::internal, fmt::format("{}: cannot open to hash it: {}", path.string(), std::strerror(errno)),
                "check that the file exists and that hpcbake may read it");
  Sha256 h;
  HPCBAKE_TRY_ASSIGN(const std::uint64_t total, h.update_from_fd(fd.get(), path.string()));
  HPCBAKE_TRY_ASSIGN(std::string hex, h.hex());
  if (bytes) *bytes = total;
  return hex;
}

Result<std::string> sha256_of(std::string_view data) {
  Sha256 h;
  HPCBAKE_TRY(h.update(data.data(), data.size()));
  return h.hex();
}

} // namespace hpcbake::util
