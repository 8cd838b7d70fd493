#pragma once
// Incremental SHA-256 (OpenSSL EVP). OpenSSL stays out of this header.
#include <cstddef>
#include <memory>
#include <string>

namespace hpcbake::fetch {

class Sha256 {
public:
  Sha256();
  ~Sha256();
  Sha256(Sha256&&) noexcept;
  Sha256& operator=(Sha256&&) noexcept;
  void update(const void* data, std::size_t size);
  // Reads fd from its current offset to EOF into the digest; returns the bytes read, or -1.
  long long update_from_fd(int fd);
  std::string hex(); // finishes; call reset() before reusing
  void reset();

private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

// Hashes a whole file; empty optional-like "" when it cannot be read.
std::string sha256_file(const std::string& path, std::size_t* bytes = nullptr);

} // namespace hpcbake::fetch
