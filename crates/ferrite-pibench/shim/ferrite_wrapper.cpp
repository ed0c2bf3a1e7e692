// PiBench's tree_api over Ferrite's C API (crates/ferrite-c, include/ferrite.h):
// the adapter has no glue of its own. The driver calls these methods from its
// worker threads; ferrite_map handles are thread-safe, and scan results live
// in a per-thread buffer as the interface asks.
//
// $FERRITE_PIBENCH_INDEX picks the map: `ferrite` (default; the durable map
// of a pool: an existing pool file at pool_path is reopened, otherwise one of
// pool_size bytes is created there, 0 = 4 GiB; an empty pool_path means a
// temporary pool in /dev/shm, removed when the tree is deleted) or
// `ferrite-dram` (the same map in DRAM, ferrite_db_volatile_map). PiBench's
// own wrappers/stlmap is the std::map baseline.
#include <unistd.h>

#include <atomic>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <new>
#include <string>
#include <vector>

#include "ferrite.h"
#include "tree_api.hpp"

namespace {

constexpr std::uint64_t kDefaultPoolSize = 4ull << 30;  // tmpfs pages cost only when touched
constexpr const char* kMapName = "pibench";

struct value_out {
    char* out;
    std::size_t cap;
};

// ferrite_map_get_with's callback: copies at most the record's value size.
void copy_value(void* ctx, const std::uint8_t* v, std::size_t len) {
    auto* o = static_cast<value_out*>(ctx);
    std::size_t n = len < o->cap ? len : o->cap;
    if (n > 0 && o->out != nullptr) std::memcpy(o->out, v, n);
}

struct scan_out {
    char* buf;
    std::size_t key_size;
    std::size_t value_size;
    std::size_t n;
};

// ferrite_map_scan's callback: one <key><value> record, cut or zero-padded.
void put_record(void* ctx, const std::uint8_t* k, std::size_t kl, const std::uint8_t* v,
                std::size_t vl) {
    auto* s = static_cast<scan_out*>(ctx);
    char* r = s->buf + s->n * (s->key_size + s->value_size);
    if (s->key_size == 8 && s->value_size == 8 && kl == 8 && vl == 8) {
        // PiBench's default shape: two word copies.
        std::memcpy(r, k, 8);
        std::memcpy(r + 8, v, 8);
    } else {
        std::memset(r, 0, s->key_size + s->value_size);
        std::memcpy(r, k, kl < s->key_size ? kl : s->key_size);
        std::memcpy(r + s->key_size, v, vl < s->value_size ? vl : s->value_size);
    }
    s->n++;
}

class ferrite_tree final : public tree_api {
public:
    ferrite_tree(ferrite_db* db, ferrite_map* map, std::string temp, std::size_t key_size,
                 std::size_t value_size)
        : db_(db), map_(map), temp_(std::move(temp)), key_size_(key_size), value_size_(value_size) {}

    ~ferrite_tree() override {
        ferrite_map_free(map_);
        int st = ferrite_db_close(db_);
        if (st < 0) std::fprintf(stderr, "ferrite: close: %s\n", ferrite_last_error());
        if (!temp_.empty()) unlink(temp_.c_str());
    }

    bool find(const char* key, std::size_t key_sz, char* value_out) override {
        struct value_out o = {value_out, value_size_};
        return ferrite_map_get_with(map_, bytes(key), key_sz, copy_value, &o) == FERRITE_OK;
    }

    bool insert(const char* key, std::size_t key_sz, const char* value,
                std::size_t value_sz) override {
        return ferrite_map_insert(map_, bytes(key), key_sz, bytes(value), value_sz) == FERRITE_OK;
    }

    bool update(const char* key, std::size_t key_sz, const char* value,
                std::size_t value_sz) override {
        return ferrite_map_update(map_, bytes(key), key_sz, bytes(value), value_sz) == FERRITE_OK;
    }

    bool remove(const char* key, std::size_t key_sz) override {
        return ferrite_map_remove(map_, bytes(key), key_sz) == FERRITE_OK;
    }

    int scan(const char* key, std::size_t key_sz, int scan_sz, char*& values_out) override {
        static thread_local std::vector<char> buf;
        if (scan_sz <= 0) {
            values_out = buf.data();
            return 0;
        }
        std::size_t need = (key_size_ + value_size_) * static_cast<std::size_t>(scan_sz);
        if (buf.size() < need) buf.resize(need);
        scan_out s = {buf.data(), key_size_, value_size_, 0};
        int st = ferrite_map_scan(map_, bytes(key), key_sz, static_cast<std::size_t>(scan_sz),
                                  put_record, &s, nullptr);
        values_out = buf.data();
        return st == FERRITE_OK ? static_cast<int>(s.n) : 0;
    }

    // PiBench calls this on every worker thread before the thread's first
    // operation of each phase (bulk load, load, verification, run). Ferrite
    // needs no per-thread setup: every ferrite_map_* call is thread-safe, and
    // its per-thread state (scan buffers, allocator caches, write stripe,
    // persist counters) is created on the thread's first use. So this only
    // counts the calls, which lets the dlopen test prove that the driver's
    // last vtable slot reaches this method (ferrite_pibench_tls_setups).
    void tls_setup() override { tls_setups_.fetch_add(1, std::memory_order_relaxed); }

    std::uint64_t tls_setups() const { return tls_setups_.load(std::memory_order_relaxed); }

private:
    static const std::uint8_t* bytes(const char* p) {
        return reinterpret_cast<const std::uint8_t*>(p);
    }

    ferrite_db* db_;
    ferrite_map* map_;
    std::string temp_;
    std::size_t key_size_;
    std::size_t value_size_;
    std::atomic<std::uint64_t> tls_setups_{0};
};

// Reports a failed call of the C API and says which.
bool ok(int st, const char* what) {
    if (st < 0) {
        std::fprintf(stderr, "ferrite: create_tree: %s: %s (%s)\n", what, ferrite_last_error(),
                     ferrite_status_name(st));
        return false;
    }
    return true;
}

tree_api* create(const tree_options_t* opt) {
    const char* which = std::getenv("FERRITE_PIBENCH_INDEX");
    std::string index = which == nullptr || *which == '\0' ? "ferrite" : which;
    ferrite_db* db = nullptr;
    ferrite_map* map = nullptr;
    std::string temp;
    if (index == "ferrite-dram") {
        if (!ok(ferrite_db_volatile(16u << 20, &db), "ferrite_db_volatile")) return nullptr;
        if (!ok(ferrite_db_volatile_map(db, &map), "ferrite_db_volatile_map")) {
            ferrite_db_close(db);
            return nullptr;
        }
    } else if (index == "ferrite") {
        std::uint64_t size = opt->pool_size == 0 ? kDefaultPoolSize : opt->pool_size;
        std::string path = opt->pool_path;
        if (path.empty()) {
            static std::atomic<unsigned> n{0};
            path = "/dev/shm/ferrite-pibench-" + std::to_string(getpid()) + "-" +
                   std::to_string(n.fetch_add(1)) + ".pool";
            temp = path;
        }
        if (!ok(ferrite_db_open_or_create(path.c_str(), size, &db), path.c_str())) {
            return nullptr;
        }
        if (!ok(ferrite_db_map(db, kMapName, &map), "ferrite_db_map")) {
            ferrite_db_close(db);
            if (!temp.empty()) unlink(temp.c_str());
            return nullptr;
        }
    } else {
        std::fprintf(stderr,
                     "ferrite: create_tree: FERRITE_PIBENCH_INDEX=%s: use ferrite or ferrite-dram "
                     "(PiBench's own wrappers/stlmap is the std::map baseline)\n",
                     index.c_str());
        return nullptr;
    }
    return new ferrite_tree(db, map, temp, opt->key_size, opt->value_size);
}

}  // namespace

// Called by the Rust-side `create_tree` (the exported symbol), which forwards
// the driver's tree_options_t reference as a pointer.
extern "C" tree_api* ferrite_pibench_create_tree(const tree_options_t* opt) {
    try {
        return create(opt);
    } catch (...) {
        std::fprintf(stderr, "ferrite: create_tree failed: out of memory\n");
        return nullptr;
    }
}

// Called by the Rust-side `ferrite_pibench_tls_setups` (exported): how often
// tls_setup ran on this tree; -1 when the tree is not one of ours.
extern "C" std::int64_t ferrite_pibench_tree_tls_setups(const tree_api* tree) {
    const auto* t = dynamic_cast<const ferrite_tree*>(tree);
    return t == nullptr ? -1 : static_cast<std::int64_t>(t->tls_setups());
}
