// The interface PiBench (github.com/sfu-dis/pibench) loads a tree through: a
// shared library exporting `create_tree`, returning an object whose virtual
// methods the driver calls from its worker threads. The layout of
// tree_options_t and the order of the virtual methods must match the driver's
// include/tree_api.hpp for the library to load into it.
//
// Current PiBench's vtable is: destructor, bulk_load, find, insert, update,
// remove, scan, and tree_options_t ends with `void* data` (the driver's epoch
// manager under EPOCH_BASED_RECLAMATION). That is the default here. The first
// (2019) PiBench releases had no bulk_load slot: build with
// FERRITE_PIBENCH_BULK_LOAD=0 in the environment (build.rs then defines
// FERRITE_PIBENCH_NO_BULK_LOAD) to match those. The library only reads the
// first five fields of tree_options_t.
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
#ifndef FERRITE_PIBENCH_NO_BULK_LOAD
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
#endif
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
};

#endif
