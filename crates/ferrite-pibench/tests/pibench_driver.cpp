// Loads libferrite_pibench.so the way PiBench does (dlopen, dlsym("create_tree"),
// virtual calls through tree_api from several threads) and either checks every
// method ("check") or runs a small PiBench-style load + run ("bench").
//
//   pibench_driver check LIB POOL_PATH
//   pibench_driver bench LIB POOL_PATH N P THREADS lookup|insert|update|scan|mixed
//
// build.rs compiles this against PiBench's own include/tree_api.hpp when a
// checkout is available, else against tests/interface/tree_api.hpp (our
// statement of the pinned commit's interface), never against the adapter's
// header. So the vtable and tree_options_t layout used here are the driver's,
// as in the real PiBench, and "check" fails when the adapter's differ:
//  - before any call through it, the adapter object's vtable must have exactly
//    as many slots as the interface (its length is the size of its symbol in
//    the library's ELF symbol table), and every slot the interface declares
//    must hold a function of the adapter library. Past the end of a short
//    vtable there may well be code: in the adapter that first shipped without
//    tls_setup, the next word was a Rust trait-object vtable's first entry,
//    drop_in_place<FerriteIndex>, so PiBench's tls_setup call ran the index's
//    destructor on the C++ object;
//  - every slot is then called, the last one (tls_setup) on each thread as
//    PiBench does, and the adapter must have counted exactly those calls
//    (ferrite_pibench_tls_setups), so the last slot reaches its tls_setup;
//  - the other slots' results are checked, which catches a reordered vtable,
//    and tree_options_t fields set here must take effect in the adapter.
// A crash or hang (a watchdog alarm) names the step it happened in.
#include <cxxabi.h>
#include <dlfcn.h>
#include <elf.h>
#include <fcntl.h>
#include <link.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <random>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "tree_api.hpp"

#ifndef FERRITE_PIBENCH_INTERFACE
#define FERRITE_PIBENCH_INTERFACE "tree_api.hpp"
#endif

using create_fn = tree_api* (*)(const tree_options_t&);
using tls_setups_fn = std::int64_t (*)(const void*);

static int g_checks = 0;

// What the driver is doing, for the fatal-signal report.
static const char* volatile g_step = "starting";

// Only async-signal-safe calls: write, signal, raise.
extern "C" void on_fatal_signal(int sig) {
    const char* step = g_step;
    static const char prefix[] = "DRIVER DIED (fatal signal or watchdog alarm) during: ";
    bool ok = write(2, prefix, sizeof prefix - 1) >= 0 && write(2, step, std::strlen(step)) >= 0 &&
              write(2, "\n", 1) >= 0;
    (void)ok;
    signal(sig, SIG_DFL);
    raise(sig);
}

// A crash is reported with the step, and a hang ends after `seconds`.
static void arm_watchdog(unsigned seconds) {
    for (int sig : {SIGSEGV, SIGBUS, SIGILL, SIGFPE, SIGALRM}) signal(sig, on_fatal_signal);
    alarm(seconds);
}

#define CHECK(cond)                                                                 \
    do {                                                                            \
        ++g_checks;                                                                 \
        if (!(cond)) {                                                              \
            std::fprintf(stderr, "CHECK FAILED %s:%d: %s\n", __FILE__, __LINE__, #cond); \
            std::exit(1);                                                           \
        }                                                                           \
    } while (0)

// 8-byte big-endian key, so byte order is numeric order.
static void be_key(uint64_t v, char* out) {
    for (int i = 7; i >= 0; --i) {
        out[i] = static_cast<char>(v & 0xff);
        v >>= 8;
    }
}

static uint64_t from_be(const char* p) {
    uint64_t v = 0;
    for (int i = 0; i < 8; ++i) v = (v << 8) | static_cast<unsigned char>(p[i]);
    return v;
}

struct library {
    void* handle;
    create_fn create;
};

static library load_library(const char* lib) {
    void* h = dlopen(lib, RTLD_NOW | RTLD_LOCAL);
    if (h == nullptr) {
        std::fprintf(stderr, "dlopen(%s): %s\n", lib, dlerror());
        std::exit(2);
    }
    void* sym = dlsym(h, "create_tree");
    if (sym == nullptr) {
        std::fprintf(stderr, "dlsym(create_tree): %s\n", dlerror());
        std::exit(2);
    }
    return {h, reinterpret_cast<create_fn>(sym)};
}

// The vtable slot (index from the address point, where slot 0 is the first
// destructor) of a virtual member function, read from its member pointer as
// the Itanium C++ ABI lays it out: {ptr, adj}, where for a virtual function
// ptr = 1 + the slot's byte offset (on ARM: ptr = the offset, adj's low bit set).
template <class Pmf>
static std::ptrdiff_t vtable_slot(Pmf pmf) {
    static_assert(sizeof(Pmf) == 2 * sizeof(std::ptrdiff_t), "an Itanium C++ ABI member pointer");
    std::ptrdiff_t w[2];
    std::memcpy(w, &pmf, sizeof w);
    const auto word = static_cast<std::ptrdiff_t>(sizeof(void*));
#if defined(__arm__) || defined(__aarch64__)
    return (w[1] & 1) != 0 ? w[0] / word : -1;
#else
    return (w[0] & 1) != 0 ? (w[0] - 1) / word : -1;
#endif
}

// The executable address ranges of the loaded object containing `probe`.
struct code_ranges {
    std::uintptr_t probe = 0;
    bool found = false;
    std::uintptr_t bias = 0;  // runtime address - ELF file address
    std::vector<std::pair<std::uintptr_t, std::uintptr_t>> exec;
};

static int collect_code(struct dl_phdr_info* info, std::size_t, void* arg) {
    auto* r = static_cast<code_ranges*>(arg);
    bool contains = false;
    std::vector<std::pair<std::uintptr_t, std::uintptr_t>> exec;
    for (int i = 0; i < info->dlpi_phnum; ++i) {
        const auto& ph = info->dlpi_phdr[i];
        if (ph.p_type != PT_LOAD) continue;
        std::uintptr_t lo = info->dlpi_addr + ph.p_vaddr;
        std::uintptr_t hi = lo + ph.p_memsz;
        if (r->probe >= lo && r->probe < hi) contains = true;
        if ((ph.p_flags & PF_X) != 0) exec.emplace_back(lo, hi);
    }
    if (!contains) return 0;
    r->found = true;
    r->bias = info->dlpi_addr;
    r->exec = std::move(exec);
    return 1;
}

// The object symbol of the ELF file `path` at file address `addr`: its name
// and size in bytes; size -1 when the file has no symbol table (stripped) or
// no such symbol.
struct elf_symbol {
    std::string name;
    long long size = -1;
};

static elf_symbol object_symbol_at(const char* path, std::uintptr_t addr) {
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
    for (int i = 0; ok && i < eh->e_shnum && found.size < 0; ++i) {
        if (sh[i].sh_type != SHT_SYMTAB || sh[i].sh_entsize != sizeof(Elf64_Sym)) continue;
        if (sh[i].sh_offset + sh[i].sh_size > len || sh[i].sh_link >= eh->e_shnum) continue;
        const Elf64_Shdr& strtab = sh[sh[i].sh_link];
        if (strtab.sh_offset + strtab.sh_size > len) continue;
        const auto* syms = reinterpret_cast<const Elf64_Sym*>(base + sh[i].sh_offset);
        for (std::size_t k = 0; k < sh[i].sh_size / sizeof(Elf64_Sym); ++k) {
            if (ELF64_ST_TYPE(syms[k].st_info) != STT_OBJECT || syms[k].st_value != addr) continue;
            found.size = static_cast<long long>(syms[k].st_size);
            if (syms[k].st_name < strtab.sh_size) {
                const char* nm = reinterpret_cast<const char*>(base + strtab.sh_offset) + syms[k].st_name;
                found.name.assign(nm, strnlen(nm, strtab.sh_size - syms[k].st_name));
            }
            break;
        }
    }
    munmap(map, len);
    return found;
}

static std::string demangle(const std::string& name) {
    int status = 0;
    char* d = abi::__cxa_demangle(name.c_str(), nullptr, nullptr, &status);
    std::string out = status == 0 && d != nullptr ? d : name;
    std::free(d);
    return out;
}

// Checks, without calling anything, that the adapter object's vtable has as
// many slots as the interface this driver was compiled against, and that each
// slot holds a function of the adapter library. Exits 3 (with the slot named)
// otherwise.
static void check_vtable(const char* path, const library& lib, const tree_api* t) {
    g_step = "checking the adapter's vtable";
    code_ranges code;
    code.probe = reinterpret_cast<std::uintptr_t>(lib.create);
    dl_iterate_phdr(collect_code, &code);
    CHECK(code.found && !code.exec.empty());
    const struct {
        const char* name;
        std::ptrdiff_t slot;
    } slots[] = {
        {"bulk_load", vtable_slot(&tree_api::bulk_load)},
        {"find", vtable_slot(&tree_api::find)},
        {"insert", vtable_slot(&tree_api::insert)},
        {"update", vtable_slot(&tree_api::update)},
        {"remove", vtable_slot(&tree_api::remove)},
        {"scan", vtable_slot(&tree_api::scan)},
        {"tls_setup", vtable_slot(&tree_api::tls_setup)},
    };
    // The object's first word is its vtable pointer (Itanium C++ ABI).
    void* const* vtable;
    std::memcpy(&vtable, static_cast<const void*>(t), sizeof vtable);
    std::printf("interface: %s\nvtable:", FERRITE_PIBENCH_INTERFACE);
    std::ptrdiff_t last = -1;
    for (const auto& s : slots) {
        std::printf(" %s=%td", s.name, s.slot);
        last = s.slot > last ? s.slot : last;
    }
    std::printf("\n");
    // tls_setup is the last slot the interface declares.
    CHECK(vtable_slot(&tree_api::tls_setup) == last);
    // Exactly the interface's length: slots 0 .. last. The vtable symbol
    // starts two words (offset-to-top, RTTI) before the slots.
    const long long want = static_cast<long long>(last) + 1;
    const std::uintptr_t symbol =
        reinterpret_cast<std::uintptr_t>(vtable) - 2 * sizeof(void*) - code.bias;
    elf_symbol vt = object_symbol_at(path, symbol);
    if (vt.size < 0) {
        std::printf("vtable length: not checked (%s has no symbol table)\n", path);
    } else {
        long long have = vt.size / static_cast<long long>(sizeof(void*)) - 2;
        if (have != want || vt.name.rfind("_ZTV", 0) != 0) {
            std::fprintf(stderr,
                         "VTABLE MISMATCH: %s (%s) has %lld slots; the interface (%s) has %lld, "
                         "the last being tls_setup at slot %td\n",
                         demangle(vt.name).c_str(), vt.name.c_str(), have,
                         FERRITE_PIBENCH_INTERFACE, want, last);
            std::exit(3);
        }
        ++g_checks;
        std::printf("vtable length: %lld slots, as the interface (%s)\n", have,
                    demangle(vt.name).c_str());
    }
    for (const auto& s : slots) {
        CHECK(s.slot >= 2);  // virtual, after the two destructor slots
        auto fn = reinterpret_cast<std::uintptr_t>(vtable[s.slot]);
        bool in_code = false;
        for (const auto& r : code.exec) in_code |= fn >= r.first && fn < r.second;
        if (!in_code) {
            std::fprintf(stderr,
                         "VTABLE MISMATCH: slot %td (%s) of the adapter's tree_api object holds "
                         "%#zx, not a function of the adapter library: its vtable is shorter "
                         "than, or laid out differently from, %s\n",
                         s.slot, s.name, static_cast<std::size_t>(fn), FERRITE_PIBENCH_INTERFACE);
            std::exit(3);
        }
    }
}

static std::int64_t tls_setups(const library& lib, const tree_api* t) {
    auto f = reinterpret_cast<tls_setups_fn>(dlsym(lib.handle, "ferrite_pibench_tls_setups"));
    CHECK(f != nullptr);
    return f(t);
}

static int check(const char* path, const std::string& pool_path) {
    library lib = load_library(path);
    create_fn create = lib.create;
    tree_options_t opt;
    opt.key_size = 8;
    opt.value_size = 8;
    opt.pool_path = pool_path;
    opt.pool_size = 256ull << 20;
    opt.num_threads = 2;
    opt.data = nullptr;
    tree_api* t = create(opt);
    CHECK(t != nullptr);

    // The layout first, then the last slot, as PiBench's first call is.
    check_vtable(path, lib, t);
    CHECK(tls_setups(lib, t) == 0);
    g_step = "calling the last vtable slot, tls_setup";
    t->tls_setup();
    CHECK(tls_setups(lib, t) == 1);
    g_step = "checking find, insert, update, remove, scan and bulk_load";

    char k[8], v[8], out[8];
    be_key(0, k);  // PiBench's first key is 0: an ordinary key
    std::memcpy(v, "value-00", 8);
    CHECK(!t->find(k, 8, out));
    CHECK(t->insert(k, 8, v, 8));
    CHECK(!t->insert(k, 8, v, 8));
    CHECK(t->find(k, 8, out) && std::memcmp(out, "value-00", 8) == 0);
    std::memcpy(v, "value-01", 8);
    CHECK(t->update(k, 8, v, 8));
    CHECK(t->find(k, 8, out) && std::memcmp(out, "value-01", 8) == 0);
    be_key(1, k);
    CHECK(!t->update(k, 8, v, 8));
    CHECK(!t->remove(k, 8));
    CHECK(!t->find(k, 8, out));

    // Even keys 2..2000, value = the number.
    for (uint64_t i = 1; i <= 1000; ++i) {
        be_key(2 * i, k);
        be_key(2 * i, v);
        CHECK(t->insert(k, 8, v, 8));
    }
    // scan from an absent key lands on the next one; records are contiguous
    // <key><value> pairs in ascending order.
    char* recs = nullptr;
    be_key(101, k);
    int n = t->scan(k, 8, 10, recs);
    CHECK(n == 10 && recs != nullptr);
    for (int i = 0; i < n; ++i) {
        uint64_t key = from_be(recs + i * 16);
        CHECK(key == 102 + 2 * static_cast<uint64_t>(i));
        CHECK(from_be(recs + i * 16 + 8) == key);
    }
    be_key(0, k);
    n = t->scan(k, 8, 100, recs);
    CHECK(n == 100);
    CHECK(from_be(recs) == 0 && std::memcmp(recs + 8, "value-01", 8) == 0);
    for (int i = 1; i < n; ++i) CHECK(from_be(recs + i * 16) > from_be(recs + (i - 1) * 16));
    be_key(1999, k);
    CHECK(t->scan(k, 8, 100, recs) == 1 && from_be(recs) == 2000);
    be_key(2001, k);
    CHECK(t->scan(k, 8, 100, recs) == 0);
    // The adapter does not bulk load: false, and nothing changes.
    char one[16] = {};
    CHECK(!t->bulk_load(one, 1, 8, 8));
    CHECK(t->scan(k, 8, 100, recs) == 0);
    be_key(1000, k);
    CHECK(t->remove(k, 8));
    CHECK(!t->remove(k, 8));
    CHECK(!t->find(k, 8, out));
    be_key(998, k);
    CHECK(t->scan(k, 8, 2, recs) == 2 && from_be(recs) == 998 && from_be(recs + 16) == 1002);

    // Two threads insert disjoint keys and read them back concurrently.
    g_step = "two threads: tls_setup, insert, find";
    std::atomic<int> bad{0};
    std::vector<std::thread> ws;
    for (int w = 0; w < 2; ++w) {
        ws.emplace_back([&, w] {
            t->tls_setup();  // as PiBench does on each worker thread
            char kk[8], vv[8], oo[8];
            for (uint64_t i = 0; i < 5000; ++i) {
                uint64_t key = 1000000 + 2 * i + static_cast<uint64_t>(w);
                be_key(key, kk);
                be_key(key * 3, vv);
                if (!t->insert(kk, 8, vv, 8)) bad++;
                if (!t->find(kk, 8, oo) || from_be(oo) != key * 3) bad++;
            }
        });
    }
    for (auto& th : ws) th.join();
    CHECK(bad.load() == 0);
    CHECK(tls_setups(lib, t) == 3);
    be_key(1000000, k);
    n = t->scan(k, 8, 100, recs);
    CHECK(n == 100);
    for (int i = 0; i < n; ++i) CHECK(from_be(recs + i * 16) == 1000000 + static_cast<uint64_t>(i));
    delete t;

    // Reopen: a persistent index keeps everything across delete + create_tree.
    const char* which = std::getenv("FERRITE_PIBENCH_INDEX");
    bool durable = !pool_path.empty() && (which == nullptr || std::string(which) == "ferrite");
    if (durable) {
        g_step = "reopening the pool";
        t = create(opt);
        CHECK(t != nullptr);
        be_key(0, k);
        CHECK(t->find(k, 8, out) && std::memcmp(out, "value-01", 8) == 0);
        be_key(1000, k);
        CHECK(!t->find(k, 8, out));
        for (uint64_t i = 0; i < 10000; ++i) {
            be_key(1000000 + i, k);
            CHECK(t->find(k, 8, out) && from_be(out) == (1000000 + i) * 3);
        }
        delete t;
    }

    // String keys of 16 bytes in a temporary pool.
    g_step = "16-byte keys";
    tree_options_t s;
    s.data = nullptr;
    s.key_size = 16;
    s.value_size = 8;
    s.pool_size = 64ull << 20;
    t = create(s);
    CHECK(t != nullptr);
    char sk[17];
    for (int i = 0; i < 300; ++i) {
        std::snprintf(sk, sizeof sk, "user%012d", i * 7);
        be_key(static_cast<uint64_t>(i), v);
        CHECK(t->insert(sk, 16, v, 8));
    }
    std::snprintf(sk, sizeof sk, "user%012d", 700);
    n = t->scan(sk, 16, 5, recs);
    CHECK(n == 5);
    for (int i = 0; i < n; ++i) {
        char want[17];
        std::snprintf(want, sizeof want, "user%012d", 700 + 7 * i);
        CHECK(std::memcmp(recs + i * 24, want, 16) == 0);
        CHECK(from_be(recs + i * 24 + 16) == static_cast<uint64_t>(100 + i));
    }
    CHECK(t->find(sk, 16, out) && from_be(out) == 100);
    CHECK(t->remove(sk, 16) && !t->find(sk, 16, out));
    delete t;

    std::printf("pibench adapter: %d checks passed\n", g_checks);
    return 0;
}

// A PiBench-shaped measurement: load n scrambled 8-byte keys, then p operations.
static uint64_t scramble(uint64_t id) {
    uint64_t x = id * 0xD6E8FEB86659FD93ull;
    return x ^ (x >> 32);
}

static int bench(const char* lib, const std::string& pool_path, uint64_t n, uint64_t p,
                 int threads, const std::string& mix) {
    create_fn create = load_library(lib).create;
    tree_options_t opt;
    opt.data = nullptr;
    opt.pool_path = pool_path;
    opt.pool_size = 0;
    opt.num_threads = static_cast<size_t>(threads);
    tree_api* t = create(opt);
    if (t == nullptr) return 1;
    auto t0 = std::chrono::steady_clock::now();
    std::vector<std::thread> ws;
    for (int w = 0; w < threads; ++w) {
        ws.emplace_back([&, w] {
            t->tls_setup();
            char k[8], v[8];
            for (uint64_t id = static_cast<uint64_t>(w); id < n; id += static_cast<uint64_t>(threads)) {
                be_key(scramble(id), k);
                be_key(id, v);
                t->insert(k, 8, v, 8);
            }
        });
    }
    for (auto& th : ws) th.join();
    double load_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    ws.clear();
    std::atomic<uint64_t> hits{0};
    std::atomic<uint64_t> fresh{n};
    double exp_ss = std::log(0.2) / std::log(0.8);
    t0 = std::chrono::steady_clock::now();
    for (int w = 0; w < threads; ++w) {
        ws.emplace_back([&, w] {
            t->tls_setup();
            std::mt19937_64 rng(1729 + static_cast<uint64_t>(w));
            std::uniform_real_distribution<double> u(0.0, 1.0);
            char k[8], v[8], out[8];
            char* recs = nullptr;
            uint64_t h = 0;
            uint64_t quota = p / static_cast<uint64_t>(threads);
            for (uint64_t i = 0; i < quota; ++i) {
                uint64_t id;
                bool mixed = mix == "mixed";
                if (mix == "insert") {
                    id = fresh.fetch_add(1, std::memory_order_relaxed);
                } else if (mixed) {
                    id = static_cast<uint64_t>(static_cast<double>(n) * std::pow(u(rng), exp_ss));
                    if (id >= n) id = n - 1;
                } else {
                    id = rng() % n;
                }
                be_key(scramble(id), k);
                be_key(id, v);
                bool ok;
                if (mix == "lookup" || (mixed && u(rng) < 0.5)) {
                    ok = t->find(k, 8, out);
                } else if (mix == "insert") {
                    ok = t->insert(k, 8, v, 8);
                } else if (mix == "update" || mixed) {
                    ok = t->update(k, 8, v, 8);
                } else {
                    ok = t->scan(k, 8, 100, recs) > 0;
                }
                h += ok ? 1 : 0;
            }
            hits += h;
        });
    }
    for (auto& th : ws) th.join();
    double run_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    uint64_t done = (p / static_cast<uint64_t>(threads)) * static_cast<uint64_t>(threads);
    std::printf("{\"mix\":\"%s\",\"threads\":%d,\"records\":%llu,\"ops\":%llu,\"load_s\":%.3f,"
                "\"mops\":%.3f,\"hit_rate\":%.4f}\n",
                mix.c_str(), threads, static_cast<unsigned long long>(n),
                static_cast<unsigned long long>(done), load_s,
                static_cast<double>(done) / run_s / 1e6,
                static_cast<double>(hits.load()) / static_cast<double>(done));
    delete t;
    return 0;
}

int main(int argc, char** argv) {
    if (argc >= 4 && std::string(argv[1]) == "check") {
        arm_watchdog(120);  // the whole check takes about a second
        std::setvbuf(stdout, nullptr, _IOLBF, 0);  // keep what was printed before a crash
        return check(argv[2], argv[3]);
    }
    if (argc >= 8 && std::string(argv[1]) == "bench")
        return bench(argv[2], argv[3], std::strtoull(argv[4], nullptr, 10),
                     std::strtoull(argv[5], nullptr, 10), std::atoi(argv[6]), argv[7]);
    std::fprintf(stderr,
                 "usage: %s check LIB POOL_PATH\n"
                 "       %s bench LIB POOL_PATH N P THREADS lookup|insert|update|scan|mixed\n",
                 argv[0], argv[0]);
    return 64;
}
