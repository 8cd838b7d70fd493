"""Writes a minimal ELF64 relocatable object whose .modinfo section says what a kernel module's
would (vermagic=..., name=...): enough for libkmod and modinfo to read it as a module."""
import struct


def write_ko(path, name, kernel, intree=False):
    """`intree`: intree=Y too, as modpost writes it into a module built inside the kernel tree."""
    modinfo = (f"license=Dual MIT/GPL\0name={name.replace('-', '_')}\0"
               f"vermagic={kernel} SMP mod_unload modversions \0" + ("intree=Y\0" if intree else "")).encode()
    shstrtab = b"\0.modinfo\0.shstrtab\0"
    modinfo_off = 64
    shstr_off = modinfo_off + len(modinfo)
    sh_off = (shstr_off + len(shstrtab) + 7) & ~7
    ident = b"\x7fELF" + bytes([2, 1, 1, 0]) + bytes(8)  # 64-bit, little endian, version 1
    header = ident + struct.pack("<HHIQQQIHHHHHH", 1, 62, 1, 0, 0, sh_off, 0, 64, 0, 0, 64, 3, 2)

    def section(name_off, sh_type, offset, size):
        return struct.pack("<IIQQQQIIQQ", name_off, sh_type, 0, 0, offset, size, 0, 0, 1, 0)

    sections = (bytes(64)  # SHN_UNDEF
                + section(1, 1, modinfo_off, len(modinfo))  # .modinfo, SHT_PROGBITS
                + section(10, 3, shstr_off, len(shstrtab)))  # .shstrtab, SHT_STRTAB
    body = header + modinfo + shstrtab
    body += bytes(sh_off - len(body))
    with open(path, "wb") as f:
        f.write(body + sections)


def make_key(directory, common_name):
    """A self-signed RSA key and certificate made with the openssl command, as a kernel build or
    hpcbake makes its module-signing key: (key.pem, cert.pem, cert.der) under `directory`."""
    import os
    import subprocess
    key, pem, der = (os.path.join(directory, n) for n in ("key.pem", "cert.pem", "cert.der"))
    subprocess.run(["openssl", "req", "-new", "-x509", "-newkey", "rsa:2048", "-nodes", "-keyout", key, "-out", pem,
                    "-days", "30", "-subj", "/CN=" + common_name], check=True, capture_output=True)
    subprocess.run(["openssl", "x509", "-in", pem, "-outform", "DER", "-out", der], check=True, capture_output=True)
    return key, pem, der


def sign_ko(path, key, pem):
    """Appends a module signature as the kernel's scripts/sign-file does: a detached PKCS#7
    signature with no certificates and no attributes, struct module_signature (id_type 2,
    PKEY_ID_PKCS7; the signature's length big-endian) and the magic string."""
    import subprocess
    sig = subprocess.run(["openssl", "smime", "-sign", "-binary", "-nocerts", "-noattr", "-md", "sha256", "-outform",
                          "DER", "-signer", pem, "-inkey", key, "-in", path], check=True, capture_output=True).stdout
    info = bytes([0, 0, 2, 0, 0, 0, 0, 0]) + struct.pack(">I", len(sig))
    with open(path, "ab") as f:
        f.write(sig + info + b"~Module signature appended~\n")
