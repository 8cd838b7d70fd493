#include "fetch/sha256.hpp"

#include <openssl/evp.h>

#include <fcntl.h>
#include <unistd.h>

#include <stdexcept>
#include <vector>

namespace hpcbake::fetch {

struct Sha256::Impl {
  EVP_MD_CTX* ctx = EVP_MD_CTX_new();
  ~Impl() { EVP_MD_CTX_free(ctx); }
};

Sha256::Sha256() : impl_(std::make_unique<Impl>()) {
  if (!impl_->ctx) throw std::runtime_error("EVP_MD_CTX_new failed");
  reset();
}
Sha256::~Sha256() = default;
Sha256::Sha256(Sha256&&) noexcept = default;
Sha256& Sha256::operator=(Sha256&&) noexcept = default;

void Sha256::reset() {
  if (!impl_) { // moved from: usable again after reset()
    impl_ = std::make_unique<Impl>();
    if (!impl_->ctx) throw std::runtime_error("EVP_MD_CTX_new failed");
  }
  if (EVP_DigestInit_ex(impl_->ctx, EVP_sha256(), nullptr) != 1) throw std::runtime_error("EVP_DigestInit_ex failed");
}

void Sha256::update(const void* data, std::size_t size) { EVP_DigestUpdate(impl_->ctx, data, size); }

std::string Sha256::hex() {
  unsigned char md[EVP_MAX_MD_SIZE];
  unsigned int len = 0;
  EVP_DigestFinal_ex(impl_->ctx, md, &len);
  static const char* digits = "0123456789abcdef";
  std::string out;
  out.reserve(len * 2);
  for (unsigned int i = 0; i < len; ++i) {
    out += digits[md[i] >> 4];
    out += digits[md[i] & 0xf];
  }
  return out;
}

long long Sha256::update_from_fd(int fd) {
  std::vector<char> buf(1 << 20);
  long long total = 0;
  while (true) {
    const ssize_t n = ::read(fd, buf.data(), buf.size());
    if (n < 0) return -1;
    if (n == 0) return total;
    update(buf.data(), static_cast<std::size_t>(n));
    total += n;
  }
}

std::string sha256_file(const std::string& path, std::size_t* bytes) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return {};
  Sha256 h;
  const long long total = h.update_from_fd(fd);
  ::close(fd);
  if (total < 0) return {};
  if (bytes) *bytes = static_cast<std::size_t>(total);
  return h.hex();
}

} // namespace hpcbake::fetch
