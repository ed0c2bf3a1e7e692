// The interface PiBench (github.com/sfu-dis/pibench) loads a tree through: a
// shared library exporting `create_tree`, returning an object whose virtual
// methods the driver calls from its worker threads. The layout of
// tree_options_t and the order of the virtual methods must match the driver's
// include/tree_api.hpp for the library to load into it.
//
// Target: PiBench at commit 11c74d694331967e58cfb555d06820f8a627a6f4 (the head
// of its `optiql` branch, the commit scripts/pibench/run.sh pins). Its vtable
// is: destructor, bulk_load, find, insert, update, remove, scan, tls_setup; and
// tree_options_t ends with `void* data` (the driver's epoch manager under
// EPOCH_BASED_RECLAMATION). PiBench's master branch declares neither bulk_load
// nor tls_setup, so this library does not load into a master build.
//
// This is our own statement of that interface, not a copy of PiBench's file.
// tests/interface/tree_api.hpp states it a second time, independently, as the
// interface the tests assert; tests/interface.rs checks that the two agree and,
// when a PiBench checkout is available, that they agree with its header. The
// library only reads the first five fields of tree_options_t.
#ifndef FERRITE_TREE_API_HPP
#define FERRITE_TREE_API_HPP

#include <cstddef>
#include <string>

struct tree_options_t {
    std::size_t key_size = 8;
    std::size_t value_size = 8;
    std::string pool_path = "";
    std::size_t pool_size = 0;
    std::size_t num_threads = 1;
    void* data = nullptr;  // the driver's; unused here
};

class tree_api;
extern "C" tree_api* create_tree(const tree_options_t& opt);

class tree_api {
public:
    virtual ~tree_api() {}
    // Optional bulk load (PiBench --bulk_load); false = "not supported", and
    // the driver then exits with "Bulk loading failed!".
    virtual bool bulk_load(const char* data, std::size_t num_records, std::size_t key_sz,
                           std::size_t value_sz) {
        (void)data;
        (void)num_records;
        (void)key_sz;
        (void)value_sz;
        return false;
    }
    // Copies the value into value_out; false when the key is absent.
    virtual bool find(const char* key, std::size_t key_sz, char* value_out) = 0;
    // False when the key exists (nothing changes).
    virtual bool insert(const char* key, std::size_t key_sz, const char* value,
                        std::size_t value_sz) = 0;
    // False when the key is absent (nothing changes).
    virtual bool update(const char* key, std::size_t key_sz, const char* value,
                        std::size_t value_sz) = 0;
    virtual bool remove(const char* key, std::size_t key_sz) = 0;
    // Points values_out at up to scan_sz contiguous <key><value> records in
    // ascending key order (valid until this thread's next scan); returns the count.
    virtual int scan(const char* key, std::size_t key_sz, int scan_sz, char*& values_out) = 0;
    // Called by the driver on each worker thread before that thread's first
    // operation of a phase (bulk load, load, verification, run).
    virtual void tls_setup() {}
};

#endif
