#pragma once
// Kernel module files for tests: a minimal ELF64 relocatable that libkmod reads (name=,
// vermagic= in .modinfo), and a real module signature appended the way the kernel's sign-file
// appends it (PKCS#7 detached, issuer and serial, no certificates; struct module_signature;
// the magic string), so libkmod reports its signer and sig_key as for a built module.
#include "helpers.hpp"

#include <openssl/bio.h>
#include <openssl/pem.h>
#include <openssl/pkcs7.h>
#include <openssl/x509.h>

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <filesystem>
#include <string>

namespace test {

// A minimal ELF64 relocatable whose .modinfo says name= and vermagic=: enough for libkmod
// (the same layout as tests/cli/kofile.py). `intree`: intree=Y too, as modpost writes it into a
// module built inside the kernel tree.
inline void write_ko(const std::filesystem::path& path, const std::string& name, const std::string& kernel,
                     bool intree = false) {
  std::string modname = name;
  std::replace(modname.begin(), modname.end(), '-', '_');
  std::string modinfo = "license=Dual MIT/GPL";
  modinfo += '\0';
  modinfo += "name=" + modname;
  modinfo += '\0';
  modinfo += "vermagic=" + kernel + " SMP mod_unload modversions ";
  modinfo += '\0';
  if (intree) {
    modinfo += "intree=Y";
    modinfo += '\0';
  }
  const std::string shstrtab = std::string("\0.modinfo\0.shstrtab\0", 20);
  const std::uint64_t modinfo_off = 64, shstr_off = modinfo_off + modinfo.size();
  const std::uint64_t sh_off = (shstr_off + shstrtab.size() + 7) & ~std::uint64_t{7};
  std::string out(64, '\0');
  const unsigned char ident[16] = {0x7f, 'E', 'L', 'F', 2, 1, 1, 0};
  std::memcpy(out.data(), ident, 16);
  auto put = [&](std::size_t at, std::uint64_t v, int bytes) {
    for (int i = 0; i < bytes; ++i)
      out[at + static_cast<std::size_t>(i)] = static_cast<char>((v >> (8 * i)) & 0xff);
  };
  put(16, 1, 2);      // ET_REL
  put(18, 62, 2);     // x86-64
  put(20, 1, 4);      // version
  put(40, sh_off, 8); // e_shoff
  put(52, 64, 2);     // e_ehsize
  put(58, 64, 2);     // e_shentsize
  put(60, 3, 2);      // e_shnum
  put(62, 2, 2);      // e_shstrndx
  out += modinfo + shstrtab;
  out.resize(sh_off, '\0');
  auto section = [&](std::uint32_t name_off, std::uint32_t type, std::uint64_t offset, std::uint64_t size) {
    const std::size_t at = out.size();
    out.resize(at + 64, '\0');
    put(at, name_off, 4);
    put(at + 4, type, 4);
    put(at + 24, offset, 8);
    put(at + 32, size, 8);
    put(at + 48, 1, 8); // sh_addralign
  };
  out.resize(out.size() + 64, '\0'); // SHN_UNDEF
  section(1, 1, modinfo_off, modinfo.size());
  section(10, 3, shstr_off, shstrtab.size());
  test::write(path, out);
}

// Appends a module signature by `key_pem` (a PEM private key file) and `cert_der` (its DER
// certificate file) to the module at `path`, as `sign-file sha256 KEY CERT MODULE` does.
inline bool sign_ko(const std::filesystem::path& path, const std::filesystem::path& key_pem,
                    const std::filesystem::path& cert_der) {
  const std::string module = slurp(path), der = slurp(cert_der), pem = slurp(key_pem);
  const auto* p = reinterpret_cast<const unsigned char*>(der.data());
  X509* cert = d2i_X509(nullptr, &p, static_cast<long>(der.size()));
  BIO* kb = BIO_new_mem_buf(pem.data(), static_cast<int>(pem.size()));
  EVP_PKEY* key = kb ? PEM_read_bio_PrivateKey(kb, nullptr, nullptr, nullptr) : nullptr;
  BIO* data = BIO_new_mem_buf(module.data(), static_cast<int>(module.size()));
  PKCS7* sig = cert && key && data
                   ? PKCS7_sign(cert, key, nullptr, data, PKCS7_BINARY | PKCS7_DETACHED | PKCS7_NOCERTS | PKCS7_NOATTR)
                   : nullptr;
  std::string out;
  if (sig) {
    unsigned char* buf = nullptr;
    const int n = i2d_PKCS7(sig, &buf);
    if (n > 0) {
      const std::string pkcs7(reinterpret_cast<char*>(buf), static_cast<std::size_t>(n));
      // struct module_signature: algo, hash, id_type = PKEY_ID_PKCS7 (2), signer_len,
      // key_id_len, 3 pad bytes, sig_len (big-endian).
      std::string info(12, '\0');
      info[2] = 2;
      const auto len = static_cast<std::uint32_t>(pkcs7.size());
      for (int i = 0; i < 4; ++i)
        info[8 + static_cast<std::size_t>(i)] = static_cast<char>((len >> (8 * (3 - i))) & 0xff);
      out = module + pkcs7 + info + "~Module signature appended~\n";
    }
    OPENSSL_free(buf);
  }
  PKCS7_free(sig);
  BIO_free(data);
  BIO_free(kb);
  EVP_PKEY_free(key);
  X509_free(cert);
  if (out.empty()) return false;
  write(path, out);
  return true;
}

} // namespace test
