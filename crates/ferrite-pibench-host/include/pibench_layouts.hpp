// Ferrite's statement of the two published layouts of PiBench's plug-in
// interface (include/tree_api.hpp of github.com/sfu-dis/pibench), written from
// reading those headers: only declarations, which is all a binary interface is.
// Each sits in its own namespace so one host can drive both; the class names
// do not matter to the ABI, only the order of the virtual functions and the
// layout of tree_options_t do.
//
//   ep2     master (a78171a0; the header is unchanged since 4000a81,
//           2020-03-17). The VLDB'22 artifact sfu-dis/pibench-ep2 builds
//           DPTree, FPTree (sfu-dis/FPTree, branch pibench-ep2) and PACTree,
//           uTree against it (CMake FetchContent, GIT_TAG master) and ships
//           copies of it for LB+-Tree, ROART, HOT and Masstree (LB+-Tree's
//           copy appends three fields to tree_options_t that its create_tree
//           never reads).
//   optiql  the optiql branch at 11c74d694331967e58cfb555d06820f8a627a6f4, the
//           commit scripts/pibench pins (and ferrite-pibench implements).
//
// Itanium C++ ABI vtables (8-byte slots after offset-to-top and RTTI):
//   slot  ep2          optiql
//   0, 1  ~tree_api    ~tree_api   (complete, deleting)
//   2     find         bulk_load   (default: returns false)
//   3     insert       find
//   4     update       insert
//   5     remove       update
//   6     scan         remove
//   7                  scan
//   8                  tls_setup   (default: does nothing)
#ifndef FERRITE_PIBENCH_LAYOUTS_HPP
#define FERRITE_PIBENCH_LAYOUTS_HPP

#include <cstddef>
#include <string>

namespace ferrite_pibench {

namespace ep2 {

constexpr long SLOTS = 7;

// 64 bytes on x86-64 with libstdc++.
struct tree_options_t {
    size_t key_size = 8;
    size_t value_size = 8;
    std::string pool_path = "";
    size_t pool_size = 0;
    size_t num_threads = 1;
};

class tree_api {
public:
    virtual ~tree_api() {}
    virtual bool find(const char* key, size_t key_len, char* value_out) = 0;
    virtual bool insert(const char* key, size_t key_len, const char* value, size_t value_len) = 0;
    virtual bool update(const char* key, size_t key_len, const char* value, size_t value_len) = 0;
    virtual bool remove(const char* key, size_t key_len) = 0;
    virtual int scan(const char* key, size_t key_len, int count, char*& records_out) = 0;
};

}  // namespace ep2

namespace optiql {

constexpr long SLOTS = 9;

// 72 bytes: the ep2 fields, then `data` (PiBench leaves it uninitialised
// unless built with EBR; the host passes null).
struct tree_options_t {
    size_t key_size = 8;
    size_t value_size = 8;
    std::string pool_path = "";
    size_t pool_size = 0;
    size_t num_threads = 1;
    void* data;
};

class tree_api {
public:
    virtual ~tree_api() {}
    virtual bool bulk_load(const char* /*records*/, size_t /*count*/, size_t /*key_len*/,
                           size_t /*value_len*/) {
        return false;
    }
    virtual bool find(const char* key, size_t key_len, char* value_out) = 0;
    virtual bool insert(const char* key, size_t key_len, const char* value, size_t value_len) = 0;
    virtual bool update(const char* key, size_t key_len, const char* value, size_t value_len) = 0;
    virtual bool remove(const char* key, size_t key_len) = 0;
    virtual int scan(const char* key, size_t key_len, int count, char*& records_out) = 0;
    virtual void tls_setup() {}
};

}  // namespace optiql

static_assert(sizeof(ep2::tree_options_t) == 64, "ep2 tree_options_t is 64 bytes");
static_assert(sizeof(optiql::tree_options_t) == 72, "optiql tree_options_t is 72 bytes");

}  // namespace ferrite_pibench

#endif
