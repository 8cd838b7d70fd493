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
