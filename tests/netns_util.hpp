// A second "node" on this machine for tests: a network namespace joined to this one by a veth pair (10.77.N.2
// there, 10.77.N.1 here), removed with the object. Needs root and iproute2: `ok` says whether it was made.
#pragma once

#include <unistd.h>

#include <cstdlib>
#include <string>

namespace actord::test {

inline int sh(const std::string& command) { return std::system((command + " >/dev/null 2>&1").c_str()); }

struct NetNamespace {
  std::string ns, here_dev, there_dev, here_ip, there_ip;
  bool ok = false;

  NetNamespace() {
    const int n = static_cast<int>(getpid() % 200) + 20;
    ns = "actord-node-" + std::to_string(getpid());
    here_dev = "acta" + std::to_string(getpid() % 100000);
    there_dev = "actb" + std::to_string(getpid() % 100000);
    here_ip = "10.77." + std::to_string(n) + ".1";
    there_ip = "10.77." + std::to_string(n) + ".2";
    ok = geteuid() == 0 && sh("ip netns add " + ns) == 0 &&
         sh("ip link add " + here_dev + " type veth peer name " + there_dev) == 0 &&
         sh("ip link set " + there_dev + " netns " + ns) == 0 &&
         sh("ip addr add " + here_ip + "/24 dev " + here_dev) == 0 && sh("ip link set " + here_dev + " up") == 0 &&
         sh("ip -n " + ns + " addr add " + there_ip + "/24 dev " + there_dev) == 0 &&
         sh("ip -n " + ns + " link set " + there_dev + " up") == 0 && sh("ip -n " + ns + " link set lo up") == 0;
  }
  NetNamespace(const NetNamespace&) = delete;
  NetNamespace& operator=(const NetNamespace&) = delete;
  ~NetNamespace() {
    sh("ip link del " + here_dev);
    sh("ip netns del " + ns);
  }
  // Shapes both directions of the pair with a token bucket (`tc qdisc ... tbf`): `rate` as tc writes it ("100mbit").
  bool shape(const std::string& rate) const {
    const std::string tbf = " root tbf rate " + rate + " burst 64kb latency 200ms";
    return sh("tc qdisc add dev " + here_dev + tbf) == 0 && sh("ip netns exec " + ns + " tc qdisc add dev " + there_dev + tbf) == 0;
  }
};

}  // namespace actord::test
