// A small driver for the fuzz targets where libFuzzer is not available (gcc): runs every seed
// and every file given, then `-runs=N` inputs made from them by mutation (bit flips, byte
// changes, insertions, deletions, truncations, splices, repeated chunks, random bytes),
// from `-seed=S`. `--dump-seeds DIR` writes the seeds as files (a libFuzzer corpus).
#include <sys/stat.h>

#include <dirent.h>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <iostream>
#include <random>
#include <sstream>

#include "fuzz.h"

namespace {

std::string readFile(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  std::ostringstream ss;
  ss << f.rdbuf();
  return ss.str();
}

void addPath(const std::string& path, std::vector<std::string>* out) {
  struct stat st {};
  if (stat(path.c_str(), &st) != 0) return;
  if (S_ISDIR(st.st_mode)) {
    if (DIR* d = opendir(path.c_str())) {
      while (dirent* e = readdir(d)) {
        if (e->d_name[0] != '.') addPath(path + "/" + e->d_name, out);
      }
      closedir(d);
    }
    return;
  }
  out->push_back(readFile(path));
}

std::string mutate(const std::vector<std::string>& pool, std::mt19937_64& rng) {
  std::string s = pool.empty() ? std::string() : pool[rng() % pool.size()];
  const int edits = 1 + static_cast<int>(rng() % 4);
  for (int e = 0; e < edits; ++e) {
    const size_t n = s.size();
    switch (rng() % 9) {
      case 0:  // flip a bit
        if (n) s[rng() % n] ^= static_cast<char>(1u << (rng() % 8));
        break;
      case 1:  // set a byte to an interesting value
        if (n) {
          const unsigned char v[] = {0, 1, 0x7f, 0x80, 0xff, '0', '-', ' ', '\n', '#'};
          s[rng() % n] = static_cast<char>(v[rng() % sizeof(v)]);
        }
        break;
      case 2:  // insert random bytes
        s.insert(n ? rng() % (n + 1) : 0, std::string(1 + rng() % 8, static_cast<char>(rng())));
        break;
      case 3:  // delete a range
        if (n) {
          size_t at = rng() % n;
          s.erase(at, 1 + rng() % std::min<size_t>(16, n - at));
        }
        break;
      case 4:  // truncate
        if (n) s.resize(rng() % n);
        break;
      case 5:  // splice with another pool entry
        if (!pool.empty()) {
          const std::string& o = pool[rng() % pool.size()];
          s = s.substr(0, n ? rng() % (n + 1) : 0) + o.substr(o.empty() ? 0 : rng() % o.size());
        }
        break;
      case 6:  // repeat a chunk
        if (n) {
          size_t at = rng() % n, len = 1 + rng() % std::min<size_t>(64, n - at);
          s.insert(at, s.substr(at, len));
        }
        break;
      case 7:  // overwrite a 32-bit little-endian field with an extreme value
        if (n >= 4) {
          const uint32_t v[] = {0, 1, 0xffffffffu, 0x80000000u, 0x7fffffffu, 64, 4096};
          uint32_t x = v[rng() % 7];
          std::memcpy(&s[rng() % (n - 3)], &x, 4);
        }
        break;
      default:  // fresh random bytes
        s.assign(rng() % 256, '\0');
        for (char& c : s) c = static_cast<char>(rng());
        break;
    }
  }
  return s;
}

}  // namespace

int main(int argc, char** argv) {
  long runs = 10000;
  unsigned long long seed = 1;
  std::vector<std::string> pool = xcclFuzzSeeds();
  for (int i = 1; i < argc; ++i) {
    std::string a = argv[i];
    if (a.rfind("-runs=", 0) == 0) {
      runs = std::atol(a.c_str() + 6);
    } else if (a.rfind("-seed=", 0) == 0) {
      seed = std::strtoull(a.c_str() + 6, nullptr, 10);
    } else if (a == "--dump-seeds" && i + 1 < argc) {
      std::string dir = argv[++i];
      mkdir(dir.c_str(), 0755);
      for (size_t k = 0; k < pool.size(); ++k) {
        std::ofstream(dir + "/seed" + std::to_string(k), std::ios::binary) << pool[k];
      }
      std::cout << "wrote " << pool.size() << " seeds to " << dir << "\n";
      return 0;
    } else {
      addPath(a, &pool);
    }
  }
  auto t0 = std::chrono::steady_clock::now();
  for (const std::string& s : pool) {
    LLVMFuzzerTestOneInput(reinterpret_cast<const uint8_t*>(s.data()), s.size());
  }
  std::mt19937_64 rng(seed);
  for (long r = 0; r < runs; ++r) {
    std::string s = mutate(pool, rng);
    LLVMFuzzerTestOneInput(reinterpret_cast<const uint8_t*>(s.data()), s.size());
    if (r % 64 == 0 && pool.size() < 4096) pool.push_back(s);  // keep some for splicing
  }
  double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  std::cout << "fuzz: " << runs << " mutated inputs after " << xcclFuzzSeeds().size()
            << " seeds in " << secs << " s, no crash\n";
  return 0;
}
