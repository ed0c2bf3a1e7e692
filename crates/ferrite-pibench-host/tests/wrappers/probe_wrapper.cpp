// A PiBench wrapper for the host's tests: a std::map behind a mutex that counts
// every call by method, so a test can tell which slot the host really called.
// build.rs compiles it against each layout's tree_api.hpp (PiBench's own when
// a checkout is there, else tests/interface/<layout>/tree_api.hpp):
//   -DPROBE_OPTIQL      overrides the optiql-only slots (bulk_load, tls_setup)
//   -DPROBE_EXTRA_SLOT  adds a virtual method: a vtable neither layout has
//   -DPROBE_WRONG_ORDER scans return their records in descending order and
//                       one lookup in 7 misses (a wrapper that answers wrongly)
//   -DPROBE_SIGNED      8-byte keys compare as signed integers (LB+-Tree)
// 8-byte keys compare as native integers under ep2, as bytes under optiql.
// Values returned by find are the stored value; scans return <key><value>
// records of the sizes given to create_tree.
// At run time, PROBE_ABORT_AFTER_INSERTS=N makes the N-th insert abort the
// process (a wrapper that dies while it is being loaded), and
// PROBE_POOL_BYTES_PER_INSERT=N has the wrapper map a sparse 1 GiB pool file at
// the pool path and write N more bytes of it for every insert (as ROART's DCMM
// allocator does): on a full filesystem that store is a SIGBUS.
#include "tree_api.hpp"

#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <fcntl.h>
#include <sys/mman.h>
#include <unistd.h>
#include <map>
#include <mutex>
#include <string>
#include <vector>

extern "C" {
// find, insert, update, remove, scan, bulk_load, tls_setup, destructor
unsigned long probe_calls[8];
// The options create_tree received last.
size_t probe_key_size, probe_value_size, probe_pool_size, probe_num_threads;
char probe_pool_path[256];
}

namespace {

// Key order: the ep2 PiBench passes 8-byte keys as native integers and its
// wrappers compare them as uint64_t, so the ep2 probe does too; the optiql
// PiBench passes big-endian keys compared as bytes.
struct key_less {
    bool operator()(const std::string& a, const std::string& b) const {
#ifndef PROBE_OPTIQL
        if (a.size() == 8 && b.size() == 8) {
#ifdef PROBE_SIGNED
            int64_t x, y;  // as LB+-Tree's key_type (long long)
#else
            uint64_t x, y;
#endif
            std::memcpy(&x, a.data(), 8);
            std::memcpy(&y, b.data(), 8);
            return x < y;
        }
#endif
        return a < b;
    }
};

class probe final : public tree_api {
public:
    probe(size_t k, size_t v, const std::string& pool_path) : k_(k), v_(v) {
        const char* e = std::getenv("PROBE_POOL_BYTES_PER_INSERT");
        pool_per_insert_ = e != nullptr ? std::strtoul(e, nullptr, 10) : 0UL;
        if (pool_per_insert_ == 0) return;
        int fd = open(pool_path.c_str(), O_RDWR | O_CREAT, 0644);
        if (fd < 0 || ftruncate(fd, kPoolBytes) != 0) std::abort();
        void* p = mmap(nullptr, kPoolBytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
        if (p == MAP_FAILED) std::abort();
        close(fd);
        pool_ = static_cast<char*>(p);
    }
    ~probe() override {
        __atomic_add_fetch(&probe_calls[7], 1, __ATOMIC_RELAXED);
        if (pool_ != nullptr) munmap(pool_, kPoolBytes);
    }

    bool find(const char* key, size_t key_len, char* value_out) override {
        __atomic_add_fetch(&probe_calls[0], 1, __ATOMIC_RELAXED);
        std::lock_guard<std::mutex> g(m_);
#ifdef PROBE_WRONG_ORDER
        if (++finds_ % 7 == 0) return false;
#endif
        auto it = map_.find(std::string(key, key_len));
        if (it == map_.end()) return false;
        std::memcpy(value_out, it->second.data(), it->second.size());
        return true;
    }
    bool insert(const char* key, size_t key_len, const char* value, size_t value_len) override {
        unsigned long n = __atomic_add_fetch(&probe_calls[1], 1, __ATOMIC_RELAXED);
        if (abort_after_ != 0 && n >= abort_after_) std::abort();
        if (pool_ != nullptr) {
            size_t from = ((n - 1) * pool_per_insert_) % kPoolBytes;
            for (size_t o = 0; o < pool_per_insert_ && from + o < kPoolBytes; o += 4096)
                pool_[from + o] = 1;
        }
        std::lock_guard<std::mutex> g(m_);
        return map_.emplace(std::string(key, key_len), std::string(value, value_len)).second;
    }
    bool update(const char* key, size_t key_len, const char* value, size_t value_len) override {
        __atomic_add_fetch(&probe_calls[2], 1, __ATOMIC_RELAXED);
        std::lock_guard<std::mutex> g(m_);
        auto it = map_.find(std::string(key, key_len));
        if (it == map_.end()) return false;
        it->second.assign(value, value_len);
        return true;
    }
    bool remove(const char* key, size_t key_len) override {
        __atomic_add_fetch(&probe_calls[3], 1, __ATOMIC_RELAXED);
        std::lock_guard<std::mutex> g(m_);
        return map_.erase(std::string(key, key_len)) == 1;
    }
    int scan(const char* key, size_t key_len, int count, char*& records_out) override {
        __atomic_add_fetch(&probe_calls[4], 1, __ATOMIC_RELAXED);
        static thread_local std::vector<char> out;
        out.clear();
        std::lock_guard<std::mutex> g(m_);
        int n = 0;
        std::vector<std::pair<std::string, std::string>> got;
        for (auto it = map_.lower_bound(std::string(key, key_len));
             it != map_.end() && n < count; ++it, ++n)
            got.emplace_back(it->first, it->second);
#ifdef PROBE_WRONG_ORDER
        std::vector<std::pair<std::string, std::string>> rev(got.rbegin(), got.rend());
        got.swap(rev);
#endif
        for (auto& r : got) {
            r.first.resize(k_, '\0');
            r.second.resize(v_, '\0');
            out.insert(out.end(), r.first.begin(), r.first.end());
            out.insert(out.end(), r.second.begin(), r.second.end());
        }
        records_out = out.data();
        return n;
    }
#ifdef PROBE_OPTIQL
    bool bulk_load(const char* records, size_t count, size_t key_len, size_t value_len) override {
        __atomic_add_fetch(&probe_calls[5], 1, __ATOMIC_RELAXED);
        std::lock_guard<std::mutex> g(m_);
        for (size_t i = 0; i < count; ++i) {
            const char* r = records + i * (key_len + value_len);
            map_.emplace(std::string(r, key_len), std::string(r + key_len, value_len));
        }
        return true;
    }
    void tls_setup() override { __atomic_add_fetch(&probe_calls[6], 1, __ATOMIC_RELAXED); }
#endif
#ifdef PROBE_EXTRA_SLOT
    virtual void extra() {}
#endif

private:
    static constexpr size_t kPoolBytes = size_t{1} << 30;
    size_t k_, v_;
    size_t pool_per_insert_ = 0;
    char* pool_ = nullptr;
    unsigned long abort_after_ = [] {
        const char* e = std::getenv("PROBE_ABORT_AFTER_INSERTS");
        return e != nullptr ? std::strtoul(e, nullptr, 10) : 0UL;
    }();
    std::mutex m_;
    std::map<std::string, std::string, key_less> map_;
#ifdef PROBE_WRONG_ORDER
    unsigned long finds_ = 0;
#endif
};

}  // namespace

extern "C" tree_api* create_tree(const tree_options_t& opt) {
    probe_key_size = opt.key_size;
    probe_value_size = opt.value_size;
    probe_pool_size = opt.pool_size;
    probe_num_threads = opt.num_threads;
    std::strncpy(probe_pool_path, opt.pool_path.c_str(), sizeof probe_pool_path - 1);
    return new probe(opt.key_size, opt.value_size, opt.pool_path);
}
