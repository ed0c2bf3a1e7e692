// The host side of PiBench's plug-in interface: loads a wrapper library
// (`create_tree` + a `tree_api` object) and calls it through a plain C API that
// the Rust crate binds (src/ffi.rs). Only declarations of the interface are
// here, written from reading PiBench's published headers (see
// include/pibench_layouts.hpp); nothing of PiBench or of any index is compiled in.
//
// Two layouts exist, and wrappers built against one crash when driven through
// the other (the vtable slots shift by one):
//   ep2    PiBench master (include/tree_api.hpp unchanged since 2020-03-17),
//          which every wrapper of the VLDB'22 artifact (sfu-dis/pibench-ep2)
//          and of FPTree's pibench-ep2 branch is built against: slots
//          ~tree_api x2, find, insert, update, remove, scan (7).
//   optiql PiBench's optiql branch at 11c74d69 (the commit scripts/pibench
//          pins): ~tree_api x2, bulk_load, find, insert, update, remove, scan,
//          tls_setup (9); tree_options_t gains a trailing `void* data`.
// The layout of a loaded object is read from the size of the vtable symbol
// its vtable pointer points into (dladdr1), and every slot the host will call
// must hold code of the library itself.

#include "pibench_layouts.hpp"

#include <dlfcn.h>
#include <elf.h>
#include <fcntl.h>
#include <link.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstdint>
#include <cstdio>
#include <cstring>
#include <exception>
#include <new>
#include <string>

namespace {

thread_local std::string g_error;

void set_error(const std::string& s) { g_error = s; }

using create_ep2 = ferrite_pibench::ep2::tree_api* (*)(const ferrite_pibench::ep2::tree_options_t&);
using create_optiql =
    ferrite_pibench::optiql::tree_api* (*)(const ferrite_pibench::optiql::tree_options_t&);

// True when `addr` is in an executable segment of the object loaded at `base`.
struct exec_probe {
    std::uintptr_t addr;
    std::uintptr_t base;
    bool in_exec;
};

int probe_exec(struct dl_phdr_info* info, std::size_t, void* arg) {
    auto* p = static_cast<exec_probe*>(arg);
    if (info->dlpi_addr != p->base) return 0;
    for (int i = 0; i < info->dlpi_phnum; ++i) {
        const auto& ph = info->dlpi_phdr[i];
        if (ph.p_type != PT_LOAD || (ph.p_flags & PF_X) == 0) continue;
        std::uintptr_t lo = info->dlpi_addr + ph.p_vaddr;
        if (p->addr >= lo && p->addr < lo + ph.p_memsz) p->in_exec = true;
    }
    return 1;
}

bool is_library_code(void* fn, std::uintptr_t base) {
    exec_probe p{reinterpret_cast<std::uintptr_t>(fn), base, false};
    dl_iterate_phdr(probe_exec, &p);
    return p.in_exec;
}

// The load bias (runtime address - file address) of the object at `base`.
struct bias_probe {
    std::uintptr_t base;
    std::uintptr_t bias;
    bool found;
};

int probe_bias(struct dl_phdr_info* info, std::size_t, void* arg) {
    auto* p = static_cast<bias_probe*>(arg);
    for (int i = 0; i < info->dlpi_phnum; ++i) {
        const auto& ph = info->dlpi_phdr[i];
        if (ph.p_type != PT_LOAD) continue;
        std::uintptr_t lo = info->dlpi_addr + ph.p_vaddr;
        if (p->base >= lo && p->base < lo + ph.p_memsz) {
            p->bias = info->dlpi_addr;
            p->found = true;
            return 1;
        }
    }
    return 0;
}

// The symbol of the ELF file `path` starting at file address `addr`, from its
// full symbol table (.symtab: local symbols too, such as the vtable of a class
// in an anonymous namespace) or, stripped, its .dynsym. Size -1: none.
struct elf_symbol {
    std::string name;
    long long size = -1;
};

elf_symbol file_symbol_at(const char* path, std::uintptr_t addr) {
    elf_symbol found;
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) return found;
    struct stat st;
    void* map = MAP_FAILED;
    if (fstat(fd, &st) == 0 && st.st_size > 0)
        map = mmap(nullptr, static_cast<std::size_t>(st.st_size), PROT_READ, MAP_PRIVATE, fd, 0);
    close(fd);
    if (map == MAP_FAILED) return found;
    const auto* base = static_cast<const unsigned char*>(map);
    const auto len = static_cast<std::size_t>(st.st_size);
    const auto* eh = reinterpret_cast<const Elf64_Ehdr*>(base);
    bool ok = len >= sizeof(Elf64_Ehdr) && std::memcmp(eh->e_ident, ELFMAG, SELFMAG) == 0 &&
              eh->e_ident[EI_CLASS] == ELFCLASS64 && eh->e_shentsize == sizeof(Elf64_Shdr) &&
              eh->e_shoff + std::size_t{eh->e_shnum} * sizeof(Elf64_Shdr) <= len;
    const auto* sh = reinterpret_cast<const Elf64_Shdr*>(base + (ok ? eh->e_shoff : 0));
    for (unsigned pass = 0; ok && pass < 2 && found.size < 0; ++pass) {
        const unsigned type = pass == 0 ? SHT_SYMTAB : SHT_DYNSYM;
        for (unsigned i = 0; i < eh->e_shnum && found.size < 0; ++i) {
            if (sh[i].sh_type != type || sh[i].sh_entsize != sizeof(Elf64_Sym)) continue;
            if (sh[i].sh_link >= eh->e_shnum) continue;
            const Elf64_Shdr& strtab = sh[sh[i].sh_link];
            if (sh[i].sh_offset + sh[i].sh_size > len || strtab.sh_offset + strtab.sh_size > len)
                continue;
            const auto* syms = reinterpret_cast<const Elf64_Sym*>(base + sh[i].sh_offset);
            for (std::size_t k = 0; k < sh[i].sh_size / sizeof(Elf64_Sym); ++k) {
                if (syms[k].st_value != addr || ELF64_ST_TYPE(syms[k].st_info) != STT_OBJECT)
                    continue;
                if (syms[k].st_name >= strtab.sh_size) continue;
                const char* n =
                    reinterpret_cast<const char*>(base + strtab.sh_offset + syms[k].st_name);
                if (std::strncmp(n, "_ZTV", 4) != 0) continue;
                found.name = n;
                found.size = static_cast<long long>(syms[k].st_size);
                break;
            }
        }
    }
    munmap(map, len);
    return found;
}

}  // namespace

extern "C" {

struct fph_tree {
    void* handle;
    int layout;  // FPH_EP2 or FPH_OPTIQL
    long slots;  // from the vtable symbol; -1 when unknown
    std::string vtable_symbol;
    ferrite_pibench::ep2::tree_api* ep2;
    ferrite_pibench::optiql::tree_api* optiql;
};

enum { FPH_AUTO = 0, FPH_EP2 = 1, FPH_OPTIQL = 2 };

// The last error of this thread (empty when none).
const char* fph_last_error() { return g_error.c_str(); }

// Slots of each layout, destructors included (the interface's own count).
long fph_layout_slots(int layout) {
    switch (layout) {
        case FPH_EP2:
            return ferrite_pibench::ep2::SLOTS;
        case FPH_OPTIQL:
            return ferrite_pibench::optiql::SLOTS;
        default:
            return -1;
    }
}

// Loads `lib`, creates the tree, and checks its vtable against `layout`
// (FPH_AUTO: take the layout the vtable's size says). Null on error
// (fph_last_error says why); the object is destroyed again on a mismatch.
fph_tree* fph_open(const char* lib, int layout, size_t key_size, size_t value_size,
                   const char* pool_path, size_t pool_size, size_t num_threads) {
    g_error.clear();
    void* h = dlopen(lib, RTLD_NOW | RTLD_LOCAL);
    if (h == nullptr) {
        const char* e = dlerror();
        set_error(std::string("dlopen: ") + (e ? e : "unknown error"));
        return nullptr;
    }
    void* sym = dlsym(h, "create_tree");
    if (sym == nullptr) {
        set_error(std::string(lib) + " exports no create_tree (not a PiBench wrapper)");
        dlclose(h);
        return nullptr;
    }
    // The optiql options are the ep2 options plus a trailing pointer, so an
    // ep2 wrapper reads a valid prefix of them: one object serves both.
    ferrite_pibench::optiql::tree_options_t opt;
    opt.key_size = key_size;
    opt.value_size = value_size;
    opt.pool_path = pool_path ? pool_path : "";
    opt.pool_size = pool_size;
    opt.num_threads = num_threads;
    opt.data = nullptr;
    void* obj = nullptr;
    try {
        obj = reinterpret_cast<create_optiql>(sym)(opt);
    } catch (const std::exception& e) {
        set_error(std::string("create_tree threw: ") + e.what());
        return nullptr;  // the library stays loaded: its state may be referenced
    } catch (...) {
        set_error("create_tree threw an exception");
        return nullptr;
    }
    if (obj == nullptr) {
        set_error("create_tree returned null");
        return nullptr;
    }
    void* const* vtable;
    std::memcpy(&vtable, obj, sizeof vtable);
    // The vtable's symbol: from the dynamic symbols when exported, else
    // from the file's symbol table.
    Dl_info info{};
    void* es_raw = nullptr;
    long slots = -1;
    std::string vsym;
    const auto point = reinterpret_cast<std::uintptr_t>(vtable);
    const bool found =
        dladdr1(static_cast<const void*>(vtable), &info, &es_raw, RTLD_DL_SYMENT) != 0;
    const auto* es = static_cast<const ElfW(Sym)*>(es_raw);
    if (found && es != nullptr && info.dli_sname != nullptr &&
        std::strncmp(info.dli_sname, "_ZTV", 4) == 0 &&
        point == reinterpret_cast<std::uintptr_t>(info.dli_saddr) + 2 * sizeof(void*) &&
        es->st_size >= 2 * sizeof(void*)) {
        // The address point follows offset-to-top and the RTTI pointer.
        slots = static_cast<long>((es->st_size - 2 * sizeof(void*)) / sizeof(void*));
        vsym = info.dli_sname;
    } else if (found && info.dli_fname != nullptr) {
        bias_probe bp{reinterpret_cast<std::uintptr_t>(info.dli_fbase), 0, false};
        dl_iterate_phdr(probe_bias, &bp);
        if (bp.found) {
            elf_symbol e = file_symbol_at(info.dli_fname, point - 2 * sizeof(void*) - bp.bias);
            if (e.size >= static_cast<long long>(2 * sizeof(void*))) {
                slots = static_cast<long>((e.size - 2 * sizeof(void*)) / sizeof(void*));
                vsym = e.name;
            }
        }
    }
    int detected = slots == ferrite_pibench::ep2::SLOTS      ? FPH_EP2
                   : slots == ferrite_pibench::optiql::SLOTS ? FPH_OPTIQL
                                                             : FPH_AUTO;
    auto destroy = [&]() {
        // Slot 1 (the deleting destructor) is the same in every layout.
        try {
            delete static_cast<ferrite_pibench::ep2::tree_api*>(obj);
        } catch (...) {
        }
    };
    if (layout == FPH_AUTO) {
        if (detected == FPH_AUTO) {
            set_error(slots < 0 ? "VTABLE UNKNOWN: the object's vtable is not a symbol of the "
                                  "library (stripped or hidden); name the layout "
                                  "(pibench-ep2: or pibench-optiql:)"
                                : "VTABLE MISMATCH: the object's vtable has " +
                                      std::to_string(slots) + " slots (" + vsym +
                                      "); PiBench's layouts have 7 (ep2) or 9 (optiql)");
            destroy();
            return nullptr;
        }
        layout = detected;
    } else if (slots >= 0 && detected != layout) {
        set_error("VTABLE MISMATCH: " + vsym + " has " + std::to_string(slots) +
                  " slots, the " + (layout == FPH_EP2 ? "ep2" : "optiql") + " layout has " +
                  std::to_string(fph_layout_slots(layout)));
        destroy();
        return nullptr;
    }
    // Every slot the host calls must be code of this library.
    std::uintptr_t base = reinterpret_cast<std::uintptr_t>(info.dli_fbase);
    Dl_info li{};
    if (dladdr(sym, &li) != 0) base = reinterpret_cast<std::uintptr_t>(li.dli_fbase);
    for (long s = 0; s < fph_layout_slots(layout); ++s) {
        if (!is_library_code(vtable[s], base)) {
            char buf[160];
            std::snprintf(buf, sizeof buf,
                          "VTABLE MISMATCH: slot %ld of the object's vtable is not code of %s", s,
                          lib);
            set_error(buf);
            destroy();
            return nullptr;
        }
    }
    auto* t = new (std::nothrow) fph_tree{h, layout, slots, vsym, nullptr, nullptr};
    if (t == nullptr) {
        set_error("out of memory");
        destroy();
        return nullptr;
    }
    if (layout == FPH_EP2)
        t->ep2 = static_cast<ferrite_pibench::ep2::tree_api*>(obj);
    else
        t->optiql = static_cast<ferrite_pibench::optiql::tree_api*>(obj);
    return t;
}

int fph_layout(const fph_tree* t) { return t->layout; }
long fph_vtable_slots(const fph_tree* t) { return t->slots; }
const char* fph_vtable_symbol(const fph_tree* t) { return t->vtable_symbol.c_str(); }

// Destroys the tree. The library stays loaded: wrappers keep thread-local
// state and atexit handlers that would dangle after dlclose.
int fph_close(fph_tree* t) {
    int rc = 0;
    try {
        if (t->ep2) delete t->ep2;
        if (t->optiql) delete t->optiql;
    } catch (const std::exception& e) {
        set_error(std::string("destructor threw: ") + e.what());
        rc = -1;
    } catch (...) {
        set_error("destructor threw");
        rc = -1;
    }
    delete t;
    return rc;
}

#define FPH_GUARD(expr)                                          \
    try {                                                        \
        return (expr);                                           \
    } catch (const std::exception& e) {                          \
        set_error(std::string("the wrapper threw: ") + e.what()); \
        return -1;                                               \
    } catch (...) {                                              \
        set_error("the wrapper threw an exception");             \
        return -1;                                               \
    }

// 1 found (value_out written), 0 absent, -1 exception.
int fph_find(fph_tree* t, const char* key, size_t klen, char* value_out) {
    FPH_GUARD(t->ep2 ? int(t->ep2->find(key, klen, value_out))
                     : int(t->optiql->find(key, klen, value_out)))
}

int fph_insert(fph_tree* t, const char* key, size_t klen, const char* v, size_t vlen) {
    FPH_GUARD(t->ep2 ? int(t->ep2->insert(key, klen, v, vlen))
                     : int(t->optiql->insert(key, klen, v, vlen)))
}

int fph_update(fph_tree* t, const char* key, size_t klen, const char* v, size_t vlen) {
    FPH_GUARD(t->ep2 ? int(t->ep2->update(key, klen, v, vlen))
                     : int(t->optiql->update(key, klen, v, vlen)))
}

int fph_remove(fph_tree* t, const char* key, size_t klen) {
    FPH_GUARD(t->ep2 ? int(t->ep2->remove(key, klen)) : int(t->optiql->remove(key, klen)))
}

// Records found (>= 0; *out points at them: <key><value> each), or -1.
int fph_scan(fph_tree* t, const char* key, size_t klen, int n, char** out) {
    *out = nullptr;
    FPH_GUARD(t->ep2 ? t->ep2->scan(key, klen, n, *out) : t->optiql->scan(key, klen, n, *out))
}

// optiql only: 1 loaded, 0 the wrapper has no bulk load, -1 exception, -2 ep2.
int fph_bulk_load(fph_tree* t, const char* records, size_t count, size_t klen, size_t vlen) {
    if (t->ep2) return -2;
    FPH_GUARD(int(t->optiql->bulk_load(records, count, klen, vlen)))
}

// optiql: the per-thread setup PiBench calls on every worker at the start of
// each phase; ep2 has no such slot (0, nothing called).
int fph_tls_setup(fph_tree* t) {
    if (t->ep2) return 0;
    FPH_GUARD((t->optiql->tls_setup(), 1))
}

}  // extern "C"

// ---- counting what PMDK flushes ------------------------------------------------
// libpmemobj flushes through libpmem's pmem_flush/pmem_drain/pmem_persist/
// pmem_memcpy/... (imported symbols). When the executable exports the
// definitions below (ferrite's build exports them: crates/ferrite-cli/build.rs),
// the dynamic linker binds libpmemobj's references to them: they count the
// cache lines flushed and the drains, then call libpmem's own functions.
// Flushes a wrapper issues with its own instructions are not seen here.

#include <atomic>

namespace {

std::atomic<unsigned long long> g_pmdk_lines{0};
std::atomic<unsigned long long> g_pmdk_drains{0};
std::atomic<unsigned long long> g_pmdk_calls{0};

void* libpmem_symbol(const char* name) {
    void* h = dlopen("libpmem.so.1", RTLD_NOW | RTLD_NOLOAD);
    if (h == nullptr) h = dlopen("libpmem.so.1", RTLD_NOW | RTLD_LOCAL);
    return h ? dlsym(h, name) : nullptr;
}

template <class F>
F real(const char* name, std::atomic<void*>& cache) {
    void* p = cache.load(std::memory_order_acquire);
    if (p == nullptr) {
        p = libpmem_symbol(name);
        if (p == nullptr) {
            std::fprintf(stderr, "ferrite-pibench-host: libpmem has no %s\n", name);
            std::abort();
        }
        cache.store(p, std::memory_order_release);
    }
    return reinterpret_cast<F>(p);
}

void count_lines(const void* addr, size_t len) {
    if (len == 0) return;
    auto a = reinterpret_cast<std::uintptr_t>(addr);
    unsigned long long lines = ((a + len - 1) >> 6) - (a >> 6) + 1;
    g_pmdk_lines.fetch_add(lines, std::memory_order_relaxed);
    g_pmdk_calls.fetch_add(1, std::memory_order_relaxed);
}

constexpr unsigned F_NODRAIN = 1u << 0;   // PMEM_F_MEM_NODRAIN
constexpr unsigned F_NOFLUSH = 1u << 5;   // PMEM_F_MEM_NOFLUSH

}  // namespace

extern "C" {

// Lines flushed and drains through libpmem since the process started, and
// how many calls were seen (0: the interposition is not active).
void fph_pmdk_counters(unsigned long long out[3]) {
    out[0] = g_pmdk_lines.load(std::memory_order_relaxed);
    out[1] = g_pmdk_drains.load(std::memory_order_relaxed);
    out[2] = g_pmdk_calls.load(std::memory_order_relaxed);
}

void pmem_flush(const void* addr, size_t len) {
    static std::atomic<void*> c{nullptr};
    count_lines(addr, len);
    real<void (*)(const void*, size_t)>("pmem_flush", c)(addr, len);
}

void pmem_persist(const void* addr, size_t len) {
    static std::atomic<void*> c{nullptr};
    count_lines(addr, len);
    g_pmdk_drains.fetch_add(1, std::memory_order_relaxed);
    real<void (*)(const void*, size_t)>("pmem_persist", c)(addr, len);
}

int pmem_msync(const void* addr, size_t len) {
    static std::atomic<void*> c{nullptr};
    count_lines(addr, len);
    g_pmdk_drains.fetch_add(1, std::memory_order_relaxed);
    return real<int (*)(const void*, size_t)>("pmem_msync", c)(addr, len);
}

void pmem_drain(void) {
    static std::atomic<void*> c{nullptr};
    g_pmdk_drains.fetch_add(1, std::memory_order_relaxed);
    g_pmdk_calls.fetch_add(1, std::memory_order_relaxed);
    real<void (*)(void)>("pmem_drain", c)();
}

void* pmem_memcpy(void* dst, const void* src, size_t len, unsigned flags) {
    static std::atomic<void*> c{nullptr};
    if ((flags & F_NOFLUSH) == 0) count_lines(dst, len);
    if ((flags & (F_NODRAIN | F_NOFLUSH)) == 0) g_pmdk_drains.fetch_add(1, std::memory_order_relaxed);
    return real<void* (*)(void*, const void*, size_t, unsigned)>("pmem_memcpy", c)(dst, src, len,
                                                                                 flags);
}

void* pmem_memmove(void* dst, const void* src, size_t len, unsigned flags) {
    static std::atomic<void*> c{nullptr};
    if ((flags & F_NOFLUSH) == 0) count_lines(dst, len);
    if ((flags & (F_NODRAIN | F_NOFLUSH)) == 0) g_pmdk_drains.fetch_add(1, std::memory_order_relaxed);
    return real<void* (*)(void*, const void*, size_t, unsigned)>("pmem_memmove", c)(dst, src, len,
                                                                                  flags);
}

void* pmem_memset(void* dst, int ch, size_t len, unsigned flags) {
    static std::atomic<void*> c{nullptr};
    if ((flags & F_NOFLUSH) == 0) count_lines(dst, len);
    if ((flags & (F_NODRAIN | F_NOFLUSH)) == 0) g_pmdk_drains.fetch_add(1, std::memory_order_relaxed);
    return real<void* (*)(void*, int, size_t, unsigned)>("pmem_memset", c)(dst, ch, len, flags);
}

// The library's own flush counter (scripts/peers' counting builds define
// `ferrite_flushed_lines`), or -1 when it has none.
long long fph_own_flushes(const fph_tree* t) {
    void* p = dlsym(t->handle, "ferrite_flushed_lines");
    if (p == nullptr) return -1;
    return static_cast<long long>(
        static_cast<std::atomic<unsigned long>*>(p)->load(std::memory_order_relaxed));
}

}  // extern "C"
