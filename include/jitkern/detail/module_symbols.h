// The symbol of a function in this module (a kernel stub: its mangled name is the kernel's), read from
// the module's static symbol table: how a host side compiled without nvcc's registration of kernels
// finds them in its device image (<jitkern/detail/kernel_image.h>). Host code only.
#pragma once

#include <dlfcn.h>
#include <elf.h>
#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstdlib>
#include <cstring>

namespace host::detail {
// This module's file, opened as the module loads: the kernel lookups read its static symbol table
// through it, so they work after the cache has removed the file (jitkern cache clear beside a server).
// Its identity (device, inode) is kept to tell that the descriptor still refers to it: a process that
// closes descriptors it did not open (a daemon) may have reused the number for another file.
[[gnu::visibility("hidden")]] inline int module_file = -1;
[[gnu::visibility("hidden")]] inline dev_t module_device = 0;
[[gnu::visibility("hidden")]] inline ino_t module_inode = 0;
[[gnu::constructor, gnu::visibility("hidden")]] inline void open_module_file() {
  Dl_info info{};
  struct stat st {};
  if (module_file < 0 && dladdr(reinterpret_cast<const void*>(&open_module_file), &info) != 0 && info.dli_fname != nullptr) {
    module_file = open(info.dli_fname, O_RDONLY | O_CLOEXEC);
    if (module_file >= 0 && fstat(module_file, &st) == 0) module_device = st.st_dev, module_inode = st.st_ino;
  }
}

// The descriptor of this module's file: the one opened at load if it still refers to the file, else the
// file reopened by its path if that is still the same file; -1 otherwise.
inline int module_file_now(const char* path) {
  struct stat st {};
  if (module_file >= 0 && fstat(module_file, &st) == 0 && st.st_dev == module_device && st.st_ino == module_inode) return module_file;
  const int reopened = path != nullptr ? open(path, O_RDONLY | O_CLOEXEC) : -1;
  if (reopened >= 0 && fstat(reopened, &st) == 0 && st.st_dev == module_device && st.st_ino == module_inode && module_inode != 0) {
    module_file = reopened;  // the old number is no longer ours to close
    return module_file;
  }
  if (reopened >= 0) close(reopened);
  return -1;
}

// The name of the function at `address` (a kernel stub: its mangled name is the kernel's), from this
// module's static symbol table (the stubs are hidden; dladdr reads only the dynamic one), in memory
// from malloc; null with `*why` set if the module has no symbol table (stripped), no function there,
// or two (stubs folded into one by identical-code folding: a launch could run the wrong kernel).
inline char* function_symbol(const void* address, const char** why) {
  Dl_info info{};
  *why = "the module's symbol table cannot be read (was it stripped? build it without -s)";
  if (dladdr(address, &info) == 0) return nullptr;
  const int file = module_file_now(info.dli_fname);
  if (file < 0) {
    *why = "the module's file is no longer open in this process (its descriptor was closed, and the cache no longer holds it at "
           "the path it was loaded from): load the module again";
    return nullptr;
  }
  struct stat st {};
  void* map = fstat(file, &st) == 0 && st.st_size > 0 ? mmap(nullptr, static_cast<std::size_t>(st.st_size), PROT_READ, MAP_PRIVATE, file, 0)
                                                      : MAP_FAILED;
  if (map == MAP_FAILED) return nullptr;
  const auto* bytes = static_cast<const unsigned char*>(map);
  const auto size = static_cast<std::size_t>(st.st_size);
  const auto offset = static_cast<Elf64_Addr>(static_cast<const char*>(address) - static_cast<const char*>(info.dli_fbase));
  const auto* ehdr = reinterpret_cast<const Elf64_Ehdr*>(bytes);
  const char* found = nullptr;
  std::size_t found_len = 0;
  bool folded = false;
  if (size >= sizeof(Elf64_Ehdr) && std::memcmp(ehdr->e_ident, ELFMAG, SELFMAG) == 0 && ehdr->e_ident[EI_CLASS] == ELFCLASS64 &&
      ehdr->e_shoff + std::size_t{ehdr->e_shnum} * sizeof(Elf64_Shdr) <= size) {
    const auto* sections = reinterpret_cast<const Elf64_Shdr*>(bytes + ehdr->e_shoff);
    for (unsigned s = 0; s < ehdr->e_shnum; ++s) {
      const Elf64_Shdr& symtab = sections[s];
      if (symtab.sh_type != SHT_SYMTAB || symtab.sh_link >= ehdr->e_shnum || symtab.sh_offset + symtab.sh_size > size) continue;
      const Elf64_Shdr& strtab = sections[symtab.sh_link];
      if (strtab.sh_offset + strtab.sh_size > size) continue;
      const auto* syms = reinterpret_cast<const Elf64_Sym*>(bytes + symtab.sh_offset);
      for (std::size_t i = 0; i < symtab.sh_size / sizeof(Elf64_Sym); ++i) {
        if (ELF64_ST_TYPE(syms[i].st_info) != STT_FUNC || syms[i].st_value != offset || syms[i].st_name >= strtab.sh_size) continue;
        const char* sym = reinterpret_cast<const char*>(bytes + strtab.sh_offset + syms[i].st_name);
        const std::size_t room = strtab.sh_size - syms[i].st_name, len = strnlen(sym, room);
        if (len == 0 || len == room) continue;
        if (found != nullptr && (len != found_len || std::memcmp(sym, found, len) != 0)) folded = true;
        found = sym, found_len = len;
      }
    }
  }
  char* name = nullptr;
  if (folded) {
    *why = "two kernel stubs share one address (identical-code folding, e.g. -Wl,--icf): build the module without it";
  } else if (found == nullptr) {
    *why = "the module's symbol table has no function at the stub's address (was it stripped? build it without -s)";
  } else if ((name = static_cast<char*>(std::malloc(found_len + 1))) != nullptr) {
    std::memcpy(name, found, found_len + 1);
  }
  munmap(map, size);
  return name;
}
}  // namespace host::detail
