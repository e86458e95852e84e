from twisted.application.reactors import Reactor
from twisted.application.service import ServiceMaker

namesrv = ServiceMaker("twisted-namesrv", "twisted_namesrv.tap", "An Apache RocketMQ NameServer", "namesrv")
#: ``twistd --reactor namesrv-epoll -n namesrv``: the reactor ``python -m twisted_namesrv`` runs (reactor.py)
namesrv_epoll = Reactor("namesrv-epoll", "twisted_namesrv.reactor",
                        "epoll, the clients' ready sockets served before the brokers' in each turn")
