#pragma once
// SHA-256 (OpenSSL EVP), streaming or of a whole file. OpenSSL stays out of this header.
// Every OpenSSL call is checked: a failure is returned, never thrown, and it sticks, so a
// streaming caller that feeds many blocks may check update() each time or only hex().
#include "util/error.hpp"

#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <memory>
#include <string>
#include <string_view>

namespace hpcbake::util {

class Sha256 {
public:
  Sha256(); // never throws: a context that cannot be made is reported by update() and hex()
  ~Sha256();
  Sha256(Sha256&&) noexcept;
  Sha256& operator=(Sha256&&) noexcept;

  // Adds bytes to the digest. After a failure every later call fails the same way.
  Status update(const void* data, std::size_t size);
  // Reads `fd` from its current offset to EOF into the digest (read() retried on EINTR);
  // returns the bytes read. `what` names the file in errors.
  Result<std::uint64_t> update_from_fd(int fd, std::string_view what);
  // Finishes: lower-case hex. Call reset() before reusing.
  [[nodiscard]] Result<std::string> hex();
  // Starts a new digest (also revives a moved-from object). Clears a previous failure.
  Status reset();

private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

// Hashes a whole file; `bytes`, when given, gets its size. An error names the file.
Result<std::string> sha256_file(const std::filesystem::path& path, std::uint64_t* bytes = nullptr);
// Hashes bytes in memory.
Result<std::string> sha256_of(std::string_view data);

} // namespace hpcbake::util
